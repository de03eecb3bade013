"""An experiment, not the shipped video model: does a video transformer with absolute positions
learn the direction word that the shipped Wan model ignores? Trains a tiny ``LattePipeline`` on
the "tpu" device and judges it as ``scripts/train_clips.py`` judges the Wan pipeline.

    nice python scripts/train_clips_latte.py --minutes 80 --out /tmp/latte

``LatteTransformer3DModel`` adds sine-cosine embeddings of the place in the frame and of the frame
in the clip to its tokens, so each token knows which side of the frame it is on (Wan's rotary
self-attention gives only offsets between places: README, "Why: the transformer cannot tell left
from right"). The pipeline: that transformer (4 heads of 32, 4 spatial and 4 temporal blocks,
patches of 2 x 2 latent pixels), the embedded image model's ``AutoencoderKL`` as it is (a frame
of this world is one of its pictures; LattePipeline decodes frame by frame) and its T5 as the
text encoder's start, its word-level tokenizer, and ``UniPCMultistepScheduler`` with flow sigmas.
Data: ``--clips`` clips of ``shapes_world`` (16 frames: Latte's temporal positions are made for a
fixed count). Trained by rectified flow as ``scripts/train_clips.py`` trains Wan (Latte's
transformer also predicts a learned variance, which LattePipeline drops: the loss fits the first
half of its output channels). The text states are what LattePipeline gives the transformer: one
prompt cut at its end, several padded to 120 tokens with the states past each end zeroed (half
the batches each way), and 10% of captions empty (``negative_prompt=""``, unzeroed). At the end
the saved folder is loaded with ``LattePipeline.from_pretrained`` and judged on ``--prompts``
random prompts at guidance 1 and 3, the first failure of each miss counted by kind (a clip that
"moved -N px" went the wrong way), and ``training.json`` records the run, with the direction
word's weight before and after it (``direction_weight``: how much the transformer's prediction
from pure noise changes when "left" replaces "right", and "up" replaces "right").

``--resume FOLDER`` continues from a folder this script saved (its ``training.json`` runs kept);
``--high-noise SHARE`` draws that share of the training times from the noisiest fifth, where
the side the object starts from is decided (logit-normal times land there 4% of the time).

    nice python scripts/train_clips_latte.py --minutes 40 --resume /tmp/latte --high-noise 0.5 \
        --out /tmp/latte-high
"""

from __future__ import annotations

import random
from pathlib import Path

import torch
from diffusers import AutoencoderKL, LattePipeline, LatteTransformer3DModel, UniPCMultistepScheduler
from train_clips import clip_data
from train_shapes import earlier_runs, judge_and_record, log, noised, parse, save, train, untie
from train_shapes import encode as encode_images
from transformers import T5EncoderModel

import tpu_lab  # noqa: F401  (the "tpu" device)
from tpu_lab.models import shapes, shapes_world

FRAMES = 16
#: LattePipeline pads every prompt to this many tokens.
PROMPT_TOKENS = 120
CALL = {"height": shapes_world.SIZE, "width": shapes_world.SIZE, "video_length": FRAMES,
        "clean_caption": False}  # fmt: skip
TRANSFORMER_CONFIG = {
    "num_attention_heads": 4,
    "attention_head_dim": 32,
    "in_channels": 8,  # the image model's latent channels
    "out_channels": 16,  # the noise and Latte's learned variance (dropped by the pipeline)
    "num_layers": 4,
    "cross_attention_dim": 128,
    "attention_bias": True,
    "sample_size": shapes_world.SIZE // 4,
    "patch_size": 2,
    "activation_fn": "gelu-approximate",
    "num_embeds_ada_norm": 1000,
    "norm_type": "ada_norm_single",
    "norm_elementwise_affine": False,
    "norm_eps": 1e-6,
    "caption_channels": shapes.T5_CONFIG["d_model"],
    "video_length": FRAMES,
}
SCHEDULER_CONFIG = {"num_train_timesteps": 1000, "use_flow_sigmas": True,
                    "prediction_type": "flow_prediction", "flow_shift": 1.0}  # fmt: skip


def components(seed: int) -> dict:
    folder = shapes.FOLDER
    torch.manual_seed(seed)
    return {
        "tokenizer": shapes.build_tokenizer(),
        "text_encoder": T5EncoderModel.from_pretrained(folder / "text_encoder_2"),
        "vae": AutoencoderKL.from_pretrained(folder / "vae"),
        "scheduler": UniPCMultistepScheduler(**SCHEDULER_CONFIG),
        "transformer": LatteTransformer3DModel(**TRANSFORMER_CONFIG),
    }


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


def judge_run(folder: Path, device: str, n: int = 100, seed: int = 1234,
              guidance: float = 3.0) -> float:  # fmt: skip
    """The share of ``n`` random prompts (from ``seed``) that the saved pipeline honours; the
    misses' first failures are printed by kind."""
    pipe = LattePipeline.from_pretrained(folder).to(device)
    pipe.set_progress_bar_config(disable=True)
    rng = random.Random(seed)
    prompts = [shapes_world.clip_caption(shapes_world.sample_clip(rng)) for _ in range(n)]
    verdicts = []
    for i in range(0, n, 25):
        chunk = prompts[i : i + 25]
        frames = pipe(chunk, negative_prompt="", guidance_scale=guidance, num_inference_steps=20,
                      generator=torch.Generator().manual_seed(i), output_type="np",
                      **CALL).frames  # fmt: skip
        verdicts += [shapes_world.judge_clip(f, p) for f, p in zip(frames, chunk, strict=True)]
    for failure, count in shapes_world.misses_by_kind(verdicts).most_common():
        log(f"  {count:3d} x {failure}")
    return sum(map(bool, verdicts)) / n


@torch.no_grad()
def direction_weight(pipe, t: float = 0.999, n: int = 8, seed: int = 0) -> dict[str, float]:
    """How much the transformer's prediction at ``t`` (pure noise, where the side the object
    starts from is decided) changes when one word of the prompt changes: "right/left" (the
    direction, which needs absolute places) and "right/up" (the axis), each the relative
    difference over ``n`` noises, in percent."""
    tr = pipe.transformer
    channels = tr.config.in_channels
    size = shapes_world.SIZE // pipe.vae_scale_factor
    noise = torch.randn((n, channels, FRAMES, size, size),
                        generator=torch.Generator().manual_seed(seed)).to(pipe.device)  # fmt: skip
    timestep = torch.full((n,), t * 1000, device=pipe.device)

    def predict(word: str) -> torch.Tensor:
        prompts = [f"a large red circle moving {word} on a black background"] * n
        states = pipe.encode_prompt(prompts, do_classifier_free_guidance=False,
                                    clean_caption=False, device=pipe.device)[0]  # fmt: skip
        return tr(hidden_states=noise, timestep=timestep, encoder_hidden_states=states,
                  return_dict=False)[0][:, :channels]  # fmt: skip

    right, left, up = (predict(w) for w in ("right", "left", "up"))
    return {f"right/{w}": round(100 * float((right - o).norm() / right.norm()), 2)
            for w, o in (("left", left), ("up", up))}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    args = parse(__doc__, argv, data="clips", count=8000, batch=8, out=Path("latte-clips"),
                 shares=[("--high-noise", 0.0, "the share of training times drawn from the "
                          "noisiest fifth, [0.8, 1), where the layout is decided")])  # fmt: skip
    if args.vae_from is not None or args.decoder_minutes > 0:
        raise SystemExit("this experiment keeps the image model's VAE as it is: drop --vae-from "
                         "and --decoder-minutes")  # fmt: skip
    parts = components(args.seed)
    earlier = earlier_runs(args.resume)
    if args.resume is not None:
        saved = LattePipeline.from_pretrained(args.resume)
        parts["transformer"], parts["text_encoder"] = saved.transformer, saved.text_encoder
        log(f"resuming {args.resume} ({len(earlier)} earlier run(s))")
    videos, captions = clip_data(args.count, args.seed, FRAMES)  # (n, 3, T, H, W)
    vae = parts["vae"]
    z = encode_images(vae, videos.transpose(1, 2).flatten(0, 1)) * vae.config.scaling_factor
    latents = z.reshape(len(videos), FRAMES, *z.shape[1:]).transpose(1, 2).contiguous()
    del videos
    log(f"latents {tuple(latents.shape)}: mean {latents.mean():.3f}, spread {latents.std():.3f}")
    before = direction_weight(LattePipeline(**parts))
    emas, history, seconds, steps = train_latte(parts, latents, captions, args.minutes * 60,
                                                args.batch, args.lr, args.device,
                                                args.high_noise)  # fmt: skip
    for name, ema in zip(("transformer", "text_encoder"), emas, strict=True):
        parts[name] = ema.cpu()
    untie(parts["text_encoder"])
    pipe = LattePipeline(**parts)
    after = direction_weight(pipe)
    log(f"a word's weight at t=0.999 (the prediction's change, %): before {before}, after {after}")
    save(pipe, args.out)
    judge_and_record(args, judge_run, (1.0, 3.0), "clips", seconds, steps, history, earlier,
                     {"high_noise": args.high_noise or None,
                      "word_weight_percent": {"before": before, "after": after}})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
