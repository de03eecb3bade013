"""Train the embedded digits model on the "tpu" device and save it into the package.

    nice python scripts/train_digits.py                  # writes tpu_lab/models/digits/
    python scripts/train_digits.py --steps 200 --out /tmp/digits --device cpu

Data: scikit-learn's handwritten digits (``sklearn.datasets.load_digits``: 1,797 images of
8x8 pixels, values 0-16, shipped with scikit-learn), scaled to [-1, 1] and kept at 8x8.
Model: the ``UNet2DModel`` of ``tpu_lab.models.digits.UNET_CONFIG`` with a class embedding
(labels 0-9, and 10 = "no class", used for 10% of the examples so that classifier-free guidance
works), trained to predict the noise of a 1000-step cosine DDPM schedule (AdamW, cosine
learning-rate decay, an exponential moving average of the weights, which is what is saved).
The saved pipeline samples with DDIM (32 steps, "trailing" spacing). The shipped weights are
the default run (1,600 steps of 128 images): 816 s on 2 CPU cores shared with other work
(``training.json`` beside the weights records the run).
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import time
from pathlib import Path

import torch
from diffusers import DDIMScheduler, DDPMScheduler, UNet2DModel
from sklearn.datasets import load_digits

import tpu_lab  # noqa: F401  (the "tpu" device)
from tpu_lab.models.digits import FOLDER, NULL_CLASS, SCHEDULE, UNET_CONFIG, DigitsPipeline


def dataset(device: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The digits as ``(N, 1, 8, 8)`` floats in [-1, 1] and their labels, on ``device``."""
    digits = load_digits()
    images = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 8.0 - 1.0
    return images.to(device), torch.tensor(digits.target).to(device)


def train(steps: int, batch: int, lr: float, seed: int, device: str, log_every: int = 100):
    torch.manual_seed(seed)
    images, labels = dataset(device)
    unet = UNet2DModel(**UNET_CONFIG).to(device)
    ema = copy.deepcopy(unet).requires_grad_(False)
    noise_schedule = DDPMScheduler(**SCHEDULE)
    optimizer = torch.optim.AdamW(unet.parameters(), lr=lr, weight_decay=1e-4)
    warmup = 50

    def factor(s: int) -> float:  # linear warm-up, then cosine decay to 0
        return min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps))

    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
    n = images.shape[0]
    start, history = time.perf_counter(), []
    for step in range(1, steps + 1):
        index = torch.randint(0, n, (batch,), device=device)
        x0, y = images[index], labels[index]
        drop = torch.rand(batch, device=device) < 0.1
        y = torch.where(drop, torch.full_like(y, NULL_CLASS), y)
        noise = torch.randn_like(x0)
        t = torch.randint(0, SCHEDULE["num_train_timesteps"], (batch,), device=device)
        noisy = noise_schedule.add_noise(x0, noise, t)
        loss = torch.nn.functional.mse_loss(unet(noisy, t, class_labels=y).sample, noise)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        schedule.step()
        decay = min(0.999, (1 + step) / (10 + step))
        with torch.no_grad():
            for e, p in zip(ema.parameters(), unet.parameters(), strict=True):
                e.lerp_(p, 1 - decay)
        if step % log_every == 0 or step == steps:
            value = loss.item()
            history.append((step, round(value, 4)))
            print(f"step {step:5d}  loss {value:.4f}  {time.perf_counter() - start:6.1f} s")
    return ema, history, time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--steps", type=int, default=1600)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="tpu")
    p.add_argument("--threads", type=int, default=2, help="CPU threads (torch.set_num_threads)")
    p.add_argument("--out", type=Path, default=FOLDER, help=f"pipeline folder (default {FOLDER})")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    ema, history, seconds = train(args.steps, args.batch, args.lr, args.seed, args.device)
    unet = UNet2DModel(**UNET_CONFIG)
    unet.load_state_dict({k: v.cpu() for k, v in ema.state_dict().items()})
    scheduler = DDIMScheduler(**SCHEDULE, timestep_spacing="trailing")
    pipe = DigitsPipeline(unet=unet, scheduler=scheduler)
    pipe.save_pretrained(args.out)
    record = {
        "data": "sklearn.datasets.load_digits (1797 images, 8x8), scaled to [-1, 1]",
        "device": args.device,
        "steps": args.steps,
        "batch": args.batch,
        "lr": args.lr,
        "seed": args.seed,
        "threads": args.threads,
        "seconds": round(seconds, 1),
        "parameters": sum(p.numel() for p in ema.parameters()),
        "loss": history,
        "torch": torch.__version__,
    }
    (args.out / "training.json").write_text(json.dumps(record, indent=1) + "\n")
    print(f"saved {args.out} ({record['parameters']:,} parameters, {seconds:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
