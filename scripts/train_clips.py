"""Train the embedded text-to-video model (a tiny WanPipeline) on the "tpu" device and save it
into the package.

    nice python scripts/train_clips.py                    # writes tpu_lab/models/clips/
    python scripts/train_clips.py --minutes 2 --out /tmp/clips --device cpu

Data: clips of one coloured shape moving, growing or changing colour, drawn and captioned by
``tpu_lab.models.shapes_world`` (a fresh set of ``--clips`` clips from ``--seed``), 17 frames of
32x32 RGB. Trained on ``--device``, from scratch, in two stages:

1. the VAE (``clips.build_vae``: frame by frame, 8x8 latent pixels of 8 channels a frame) for
   ``--vae-minutes`` on single frames of the clips: L1 + squared error of the reconstruction and
   a light KL term; its config then takes the latents' mean and spread per channel as
   ``latents_mean``/``latents_std``, and the run records the share of 100 random clips whose
   reconstruction the judge passes (what the VAE alone allows);
2. the ``WanTransformer3DModel`` together with the ``UMT5EncoderModel`` on the clips' latents,
   by rectified flow as ``scripts/train_shapes.py`` trains the image model (the
transformer predicts ``noise - x_0`` at ``x_t = (1 - t) x_0 + t noise``, its timestep
``1000 t`` as WanPipeline passes it; the text states past each prompt's end are zeroed, as
WanPipeline does); 10% of captions are empty, which is what ``guidance_scale`` needs. AdamW with
warm-up and cosine decay over a wall-clock budget; an exponential moving average of the weights
is saved. ``--resume FOLDER`` continues stage 2 from a saved pipeline (its VAE as it is;
with ``--fresh-text-encoder``, a new text encoder); ``training.json`` lists every run.
``--vae-from FOLDER`` skips stage 1: a fresh transformer on the VAE saved there.

At the end the saved pipeline is loaded back with ``WanPipeline.from_pretrained`` and judged on
100 random prompts (``shapes_world.judge_clip``).
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import torch
from diffusers import AutoencoderKLWan, WanPipeline
from train_shapes import (
    captions_batch,
    decoder_stage,
    earlier_runs,
    judge_and_record,
    log,
    noised,
    parse,
    reused_vae,
    save,
    train,
    train_vae,
    untie,
)
from train_shapes import encode as encode_images

import tpu_lab  # noqa: F401  (the "tpu" device)
from tpu_lab.models import clips, shapes, shapes_world


def clip_data(n: int, seed: int,
              frames: int = shapes_world.FRAMES) -> tuple[torch.Tensor, list[str]]:  # fmt: skip
    """``n`` random clips of ``frames`` frames as ``(n, 3, frames, 32, 32)`` floats in [-1, 1]
    and their captions."""
    rng = random.Random(seed)
    drawn = [shapes_world.sample_clip(rng) for _ in range(n)]
    pixels = np.stack([shapes_world.render_clip(c, frames) for c in drawn])  # (n, T, H, W, 3)
    videos = torch.from_numpy(pixels).permute(0, 4, 1, 2, 3).float() / 127.5 - 1
    return videos, [shapes_world.clip_caption(c) for c in drawn]


def frames_of(videos: torch.Tensor) -> torch.Tensor:
    """Clips ``(n, 3, T, H, W)`` as ``n * T`` one-frame clips ``(n * T, 3, 1, H, W)``."""
    n, c, t, h, w = videos.shape
    return videos.transpose(1, 2).reshape(n * t, c, 1, h, w)


def encode(vae, videos: torch.Tensor) -> torch.Tensor:
    """The latents of ``videos`` (the posterior means, frame by frame as the VAE codes them),
    ``(n, z, T, h, w)``, not yet normalised."""
    n, _, t = videos.shape[:3]
    z = encode_images(vae, frames_of(videos))
    return z.reshape(n, t, z.shape[1], *z.shape[3:]).transpose(1, 2).contiguous()


def normalise(vae, latents: torch.Tensor) -> torch.Tensor:
    """``(latents - latents_mean) / latents_std`` with the statistics of the VAE's config (as
    WanPipeline undoes them before ``vae.decode``)."""
    z = vae.config.z_dim
    mean = torch.tensor(vae.config.latents_mean).view(1, z, 1, 1, 1)
    std = torch.tensor(vae.config.latents_std).view(1, z, 1, 1, 1)
    return (latents - mean) / std


@torch.no_grad()
def judge_reconstructions(vae, n: int = 100, seed: int = 4321) -> float:
    """The share of ``n`` random clips whose VAE reconstruction the judge passes."""
    videos, captions = clip_data(n, seed)
    latents = encode(vae, videos)
    frames = frames_of(latents)
    out = torch.cat([vae.decode(frames[i : i + 256]).sample for i in range(0, len(frames), 256)])
    out = out.reshape(n, -1, out.shape[1], *out.shape[3:])  # (n, T, 3, H, W)
    pixels = ((out.permute(0, 1, 3, 4, 2) + 1) / 2).numpy()  # as WanPipeline's "np" output
    passed = [shapes_world.judge_clip(p, c) for p, c in zip(pixels, captions, strict=True)]
    return sum(map(bool, passed)) / n


def train_wan(parts, latents, captions, seconds, batch, lr, device, log, drop=0.1):
    tokenizer = parts["tokenizer"]
    encoded = tokenizer(captions, padding="max_length", max_length=shapes.TOKENS, truncation=True,
                        return_attention_mask=True, return_tensors="pt")  # fmt: skip
    empty = tokenizer([""], padding="max_length", max_length=shapes.TOKENS,
                      return_attention_mask=True, return_tensors="pt")  # fmt: skip
    # the ids and the mask side by side, so that a dropped caption loses both
    rows = torch.cat([encoded.input_ids, encoded.attention_mask], dim=1)
    empty_row = torch.cat([empty.input_ids, empty.attention_mask], dim=1)
    transformer, umt5 = modules = [parts["transformer"], parts["text_encoder"]]

    def batch_loss() -> torch.Tensor:
        index = torch.randint(0, len(latents), (batch,))
        ids, mask = captions_batch(rows, empty_row, index, drop).to(device).split(shapes.TOKENS, 1)
        xt, t, target = noised(latents[index].to(device))
        states = umt5(ids, mask).last_hidden_state * mask.unsqueeze(-1)
        v = transformer(hidden_states=xt, timestep=t * 1000, encoder_hidden_states=states,
                        return_dict=False)[0]  # fmt: skip
        return torch.nn.functional.mse_loss(v, target)

    return train(modules, batch_loss, seconds, lr, device, log, "wan")


def judge_run(folder: Path, device: str, n: int = 100, seed: int = 1234, steps: int = clips.STEPS,
              guidance: float = clips.GUIDANCE) -> float:
    """The share of ``n`` random prompts (from ``seed``) that the saved pipeline honours."""
    pipe = clips.clips_pipeline(device=device, path=folder)
    pipe.set_progress_bar_config(disable=True)
    rng = random.Random(seed)
    prompts = [shapes_world.clip_caption(shapes_world.sample_clip(rng)) for _ in range(n)]
    ok = 0
    for i in range(0, n, 25):
        chunk = prompts[i : i + 25]
        frames = pipe(chunk, negative_prompt=[""] * len(chunk), guidance_scale=guidance,
                      num_inference_steps=steps, generator=torch.Generator().manual_seed(i),
                      output_type="np", **clips.CALL).frames  # fmt: skip
        ok += sum(bool(shapes_world.judge_clip(f, p)) for f, p in zip(frames, chunk, strict=True))
    return ok / n


def main(argv: list[str] | None = None) -> int:
    args = parse(__doc__, argv, data="clips", count=8000, batch=8, out=clips.FOLDER,
                 extra=[("--vae-minutes", 15.0, "stage 1: the VAE's training time")],
                 flags=[("--fresh-text-encoder", "train a new text encoder (random weights) "
                         "with the resumed transformer")])  # fmt: skip
    videos, captions = clip_data(args.count, args.seed)
    earlier, vae_run, decoder_run = earlier_runs(args.resume), None, None
    if args.resume is not None:
        parts = dict(WanPipeline.from_pretrained(args.resume).components)
        log(f"resuming {args.resume} ({len(earlier)} earlier run(s))")
        if args.fresh_text_encoder:
            parts["text_encoder"] = clips.build_components(args.seed)["text_encoder"]
            log("with a fresh text encoder")
    elif args.vae_from is not None:
        parts = clips.build_components(args.seed)
        parts["vae"], vae_run = reused_vae(args.vae_from, AutoencoderKLWan)
    if args.resume is not None or args.vae_from is not None:
        parts["vae"], decoder_run = decoder_stage(args, parts["vae"], frames_of(videos),
                                                  judge_reconstructions)  # fmt: skip
        latents = encode(parts["vae"], videos)
    else:
        parts = clips.build_components(args.seed)
        vae, history, spent, steps = train_vae(parts["vae"], frames_of(videos),
                                               args.vae_minutes * 60, args.device)  # fmt: skip
        latents = encode(vae, videos)
        vae.register_to_config(latents_mean=latents.mean(dim=(0, 2, 3, 4)).tolist(),
                               latents_std=latents.std(dim=(0, 2, 3, 4)).tolist())  # fmt: skip
        parts["vae"] = vae
        vae_run = {"minutes": args.vae_minutes, "steps": steps, "seconds": round(spent, 1),
                   "loss": history, "judge_100_reconstructions": judge_reconstructions(vae)}
        log(f"vae: the judge passes {vae_run['judge_100_reconstructions']:.2f} of 100 clips' "
            "reconstructions")
    latents = normalise(parts["vae"], latents)
    del videos
    log(f"latents {tuple(latents.shape)}: mean {latents.mean():.3f}, spread {latents.std():.3f}")
    emas, history, seconds, steps = train_wan(
        parts, latents, captions, args.minutes * 60, args.batch, args.lr, args.device, log
    )
    for name, ema in zip(("transformer", "text_encoder"), emas, strict=True):
        parts[name] = ema.cpu()
    untie(parts["text_encoder"])
    save(WanPipeline(**parts), args.out)
    # guidance_scale (1: none)
    judge_and_record(args, judge_run, (1.0, 3.0), "clips", seconds, steps, history, earlier,
                     {"vae": vae_run, "decoder": decoder_run,
                      "fresh_text_encoder": args.fresh_text_encoder or None})  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
