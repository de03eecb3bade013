"""Train the embedded text-to-video model (a tiny LattePipeline) on the "tpu" device and save it
into the package.

    nice python scripts/train_clips.py --minutes 80                   # tpu_lab/models/clips/
    nice python scripts/train_clips.py --resume tpu_lab/models/clips --high-noise 0.5 --minutes 60
    nice python scripts/train_clips.py --resume tpu_lab/models/clips --decoder-minutes 10 \
        --decoder-noise 0.3 --minutes 0 --clips 2000      # the VAE's decoder only
    python scripts/train_clips.py --minutes 2 --out /tmp/clips --device cpu

Data: clips of one coloured shape moving, growing or changing colour, drawn and captioned by
``tpu_lab.models.shapes_world`` (a fresh set of ``--clips`` clips from ``--seed``), 16 frames of
32x32 RGB. The pipeline (``clips.build_components``): a fresh ``LatteTransformer3DModel``, the
embedded image model's ``AutoencoderKL`` (a frame of this world is one of its pictures;
LattePipeline decodes frame by frame) and its T5 as the text encoder's start, its
word-level tokenizer, ``UniPCMultistepScheduler`` with flow sigmas. Trained on ``--device``: the
transformer together with the T5 on the clips' latents (the VAE's posterior means times its
``scaling_factor``, as LattePipeline divides them before decoding), by rectified flow as
``scripts/train_shapes.py`` trains the image model: the transformer's first 8 output channels
predict ``noise - x_0`` at ``x_t = (1 - t) x_0 + t noise`` (Latte's other 8 are a learned
variance that LattePipeline drops), its timestep ``1000 t`` as the flow-sigma scheduler passes
it. ``--high-noise SHARE`` draws that share of the times from the noisiest fifth, [0.8, 1),
where the side the object starts from, and so the direction word, is decided (logit-normal
times land there 4% of the time). The text states are what LattePipeline gives the transformer:
one prompt cut at its end, several padded to 120 tokens with the states past each end zeroed
(half the batches each way), and 10% of captions empty (the ``negative_prompt=""`` states,
unzeroed), which is what ``guidance_scale`` needs. AdamW with warm-up and cosine decay over a
wall-clock budget; an exponential moving average of the weights is saved. ``--resume FOLDER``
continues from a saved pipeline; ``training.json`` lists every run. With ``--resume``,
``--decoder-minutes M`` first trains the saved VAE's decoder for ``M`` minutes on the clips'
frames (its encoder frozen, so the latents the transformer learned stay as they were;
``--decoder-noise`` adds noise to its latents, so that it learns to draw clean shapes from
latents a little off, as the transformer's are) and records how many of 100 random clips'
reconstructions the judge passes; ``--minutes 0`` then leaves the transformer as it was.

At the end the saved pipeline is loaded back with ``LattePipeline.from_pretrained`` and judged on
``--prompts`` random prompts (``shapes_world.judge_clip``) at guidance 1 and ``clips.GUIDANCE``,
the first failure of each miss counted by kind (a clip that "moved -N px" went the wrong way),
and ``training.json`` records the run with the direction word's weight before and after it
(``clips.direction_weight``). ``scripts/tune_clips.py`` chooses the guidance and the scheduler's
shift on other prompts than the judge's.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import torch
from diffusers import LattePipeline, UniPCMultistepScheduler
from train_shapes import (
    decoder_stage,
    earlier_runs,
    judge_and_record,
    log,
    noised,
    parse,
    save,
    train,
    untie,
)
from train_shapes import encode as encode_images

import tpu_lab  # noqa: F401  (the "tpu" device)
from tpu_lab.models import clips, shapes_world

#: LattePipeline pads every prompt to this many tokens.
PROMPT_TOKENS = 120


def clip_data(n: int, seed: int) -> tuple[torch.Tensor, list[str]]:
    """``n`` random clips as ``(n, 3, 16, 32, 32)`` floats in [-1, 1] and their captions."""
    rng = random.Random(seed)
    drawn = [shapes_world.sample_clip(rng) for _ in range(n)]
    pixels = np.stack([shapes_world.render_clip(c) for c in drawn])  # (n, T, H, W, 3)
    videos = torch.from_numpy(pixels).permute(0, 4, 1, 2, 3).float() / 127.5 - 1
    return videos, [shapes_world.clip_caption(c) for c in drawn]


def latents_of(vae, videos: torch.Tensor) -> torch.Tensor:
    """The clips' latents ``(n, z, T, h, w)``: each frame's posterior mean times the VAE's
    ``scaling_factor`` (LattePipeline divides by it, and adds no shift, before decoding)."""
    n, _, t = videos.shape[:3]
    z = encode_images(vae, videos.transpose(1, 2).flatten(0, 1)) * vae.config.scaling_factor
    return z.reshape(n, t, *z.shape[1:]).transpose(1, 2).contiguous()


def train_latte(parts, latents, captions, seconds, batch, lr, device, high=0.0, drop=0.1):
    tokenizer = parts["tokenizer"]
    encoded = tokenizer(captions, padding="max_length", max_length=PROMPT_TOKENS, truncation=True,
                        return_tensors="pt")  # fmt: skip
    empty = tokenizer([""], padding="max_length", max_length=PROMPT_TOKENS, return_tensors="pt")
    ids, mask = encoded.input_ids, encoded.attention_mask
    transformer, t5 = modules = [parts["transformer"], parts["text_encoder"]]

    def batch_loss() -> torch.Tensor:
        index = torch.randint(0, len(latents), (batch,))
        length = PROMPT_TOKENS if random.random() < 0.5 else int(mask[index].sum(1).max())
        rows, row_mask = ids[index, :length].clone(), mask[index, :length].clone()
        dropped = torch.rand(batch) < drop
        rows[dropped] = empty.input_ids[0, :length]
        row_mask[dropped] = empty.attention_mask[0, :length]
        rows, row_mask, dropped = rows.to(device), row_mask.to(device), dropped.to(device)
        states = t5(rows, attention_mask=row_mask).last_hidden_state
        keep = torch.where(dropped.view(-1, 1), torch.ones_like(row_mask), row_mask)
        xt, t, target = noised(latents[index].to(device), high)
        v = transformer(hidden_states=xt, timestep=t * 1000,
                        encoder_hidden_states=states * keep.unsqueeze(-1), return_dict=False)[0]
        return torch.nn.functional.mse_loss(v[:, : target.shape[1]], target)

    return train(modules, batch_loss, seconds, lr, device, log, "latte")


@torch.no_grad()
def judge_reconstructions(vae, n: int = 100, seed: int = 4321) -> float:
    """The share of ``n`` random clips whose reconstructions (frame by frame, as LattePipeline
    decodes) the clip judge passes."""
    videos, captions = clip_data(n, seed)
    frames = videos.transpose(1, 2).flatten(0, 1)
    out = torch.cat([vae.decode(z).sample for z in encode_images(vae, frames).split(400)])
    pixels = ((out.reshape(n, -1, *out.shape[1:]).permute(0, 1, 3, 4, 2) + 1) / 2).numpy()
    passed = [shapes_world.judge_clip(p, c) for p, c in zip(pixels, captions, strict=True)]
    return sum(map(bool, passed)) / n


def judge_run(folder: Path, device: str, n: int = 100, seed: int = 1234, steps: int = clips.STEPS,
              guidance: float = clips.GUIDANCE, shift: float | None = None) -> float:
    """The share of ``n`` random prompts (from ``seed``) that the saved pipeline honours, its
    scheduler's ``flow_shift`` replaced by ``shift`` if given; the misses' first failures are
    printed by kind."""
    pipe = clips.clips_pipeline(device=device, path=folder)
    pipe.set_progress_bar_config(disable=True)
    if shift is not None:
        pipe.scheduler = UniPCMultistepScheduler.from_config(pipe.scheduler.config,
                                                             flow_shift=shift)  # fmt: skip
    rng = random.Random(seed)
    prompts = [shapes_world.clip_caption(shapes_world.sample_clip(rng)) for _ in range(n)]
    verdicts = []
    for i in range(0, n, 25):
        chunk = prompts[i : i + 25]
        frames = pipe(chunk, negative_prompt="", guidance_scale=guidance, num_inference_steps=steps,
                      generator=torch.Generator().manual_seed(i), output_type="np",
                      **clips.CALL).frames  # fmt: skip
        verdicts += [shapes_world.judge_clip(f, p) for f, p in zip(frames, chunk, strict=True)]
    for failure, count in shapes_world.misses_by_kind(verdicts).most_common():
        log(f"  {count:3d} x {failure}")
    return sum(map(bool, verdicts)) / n


def main(argv: list[str] | None = None) -> int:
    args = parse(__doc__, argv, data="clips", count=8000, batch=8, out=clips.FOLDER,
                 shares=[("--high-noise", 0.0, "the share of training times drawn from the "
                          "noisiest fifth, [0.8, 1), where the layout is decided")])  # fmt: skip
    if args.vae_from is not None:
        raise SystemExit("the video model starts from the image model's VAE: drop --vae-from "
                         "(--resume FOLDER --decoder-minutes M tunes a saved decoder)")
    parts = clips.build_components(args.seed)
    earlier, decoder_run = earlier_runs(args.resume), None
    videos, captions = clip_data(args.count, args.seed)
    if args.resume is not None:
        saved = LattePipeline.from_pretrained(args.resume)
        for name in ("transformer", "text_encoder", "vae"):
            parts[name] = getattr(saved, name)
        log(f"resuming {args.resume} ({len(earlier)} earlier run(s))")
        parts["vae"], decoder_run = decoder_stage(args, parts["vae"],
                                                  videos.transpose(1, 2).flatten(0, 1),
                                                  judge_reconstructions)  # fmt: skip
    latents = latents_of(parts["vae"], videos)
    del videos
    log(f"latents {tuple(latents.shape)}: mean {latents.mean():.3f}, spread {latents.std():.3f}")
    before = clips.direction_weight(LattePipeline(**parts))
    emas, history, seconds, steps = train_latte(parts, latents, captions, args.minutes * 60,
                                                args.batch, args.lr, args.device,
                                                args.high_noise)  # fmt: skip
    for name, ema in zip(("transformer", "text_encoder"), emas, strict=True):
        parts[name] = ema.cpu()
    untie(parts["text_encoder"])
    pipe = LattePipeline(**parts)
    after = clips.direction_weight(pipe)
    log(f"the direction word's weight from noise (%): before {before}, after {after}")
    save(pipe, args.out)
    judge_and_record(args, judge_run, (1.0, clips.GUIDANCE), "clips", seconds, steps, history,
                     earlier, {"high_noise": args.high_noise or None, "decoder": decoder_run,
                               "word_weight_percent": {"before": before, "after": after}})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
