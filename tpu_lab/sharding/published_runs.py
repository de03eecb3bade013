"""Published measurements beside the estimates for the same runs.

Each :class:`Measured` is one public figure (a training step, a decode throughput, an image
generation time) with the run's model config (:mod:`.published_configs`), chips, batch,
sequence length and dtype, and where it was published. :func:`compare` estimates the same run
with the one set of assumptions (:mod:`tpu_lab.estimate.assumed`) and gives the ratio
estimate / measured time: an idealised chip beats a real run (ratio < 1).

Chips are counted as chips: "v4-8" and "v5p-8" name TensorCores (4 chips), "v5e-8" and
"v6e-256" name chips, and a TPU7x chip is two devices (the plan counts devices, so a 64-chip
TPU7x run is planned over 128).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .plan import plan
from .published_configs import config

RECIPES = "AI-Hypercomputer/tpu-recipes"
TRILLIUM = f"{RECIPES} training/trillium"


@dataclass(frozen=True)
class Measured:
    """One published figure and the run behind it. ``seconds`` is the published time of the
    work the estimate covers: one training step; one decode step of ``batch`` sequences
    (``batch`` / tokens per second); one generation of ``steps`` denoiser calls and a VAE
    decode per image."""

    label: str
    kind: str
    model: str
    generation: str
    task: str
    batch: int
    seconds: float
    published: str
    source: str
    chips: int = 1
    fsdp: int = 1
    data: int = 1
    seq: int | None = None
    image_size: tuple[int, int] | None = None
    steps: int = 1
    vae: str | None = None
    images: int = 0  # images one VAE decode per chip makes

    @property
    def total_chips(self) -> int:
        return self.chips * self.fsdp * self.data


def _llm_train(label, model, gen, fsdp, per_chip, seq, seconds, published, source, data=1):
    return Measured(label, "train tokens/s", model, gen, "train", per_chip * fsdp * data,
                    seconds, published, source, fsdp=fsdp, data=data, seq=seq)


def _decode(label, model, batch, tokens_per_s, source):
    return Measured(label, "decode tokens/s", model, "v5e", "decode", batch,
                    batch / tokens_per_s, f"{tokens_per_s:g} tokens/s at batch {batch}",
                    source, chips=8, seq=2048)


_JETSTREAM = "AI-Hypercomputer/jetstream-pytorch benchmarks/summary.md"
_SDXL_BLOG = "huggingface/blog sdxl_jax.md (https://huggingface.co/blog/sdxl_jax)"
_MAXDIFFUSION = "AI-Hypercomputer/maxdiffusion README.md"

#: The published figures (all bfloat16), one row each.
MEASUREMENTS: tuple[Measured, ...] = (
    _llm_train("Llama 3.1 8B train, v6e-8 (8 chips, FSDP)", "llama-3.1-8b", "v6e", 8, 3, 8192,
               3.443, "3.443 s/step, 7138.9 tokens/s/chip",
               f"{TRILLIUM}/Llama3.1-8B-MaxText/v6e-8/README.md"),
    _llm_train("Llama 3.1 70B train, v6e-64 (64 chips, FSDP)", "llama-3.1-70b", "v6e", 64, 2,
               8192, 18.688, "18.688 s/step, 876.7 tokens/s/chip",
               f"{TRILLIUM}/Llama3.1-70B-MaxText/v6e-64/README.md"),
    # the log line's total_weights (2097152 tokens) and TFLOP/s are those of 2 sequences per
    # chip, though the config listed beside it says per_device_batch_size 3
    _llm_train("Llama 2 70B train, v6e-256 (256 chips, FSDP)", "llama-2-70b", "v6e", 256, 2,
               4096, 9.052, "9.052 s/step, 905.0 tokens/s/chip (2 x 4096 tokens per chip)",
               f"{TRILLIUM}/Llama2-70B-MaxText/README.md"),
    _llm_train("Mixtral 8x7B train, v6e-256 (256 chips, FSDP)", "mixtral-8x7b", "v6e", 256, 12,
               4096, 13.484, "13.484 s/step, 3645.2 tokens/s/chip",
               f"{TRILLIUM}/Mixtral-8x7B-MaxText/README.md"),
    _llm_train("Llama 3.1 405B train, v5p-1024 (512 chips, FSDP)", "llama-3.1-405b", "v5p",
               512, 2, 8192, 131.474, "131.474 s/step, 124.6 tokens/s/chip",
               f"{RECIPES} training/v5p/Llama3.1-405B-MaxText/README.md"),
    _llm_train("Llama 3.1 70B train, TPU7x 64 chips (128 devices, FSDP)", "llama-3.1-70b",
               "v7", 128, 2, 8192, 12.20, "12.20 s/step at global batch 256, 2686.98 "
               "tokens/s/chip",
               f"{RECIPES} training/ironwood/README.md"),
    Measured("Flux.1-dev train 1024px, v5p-8 (4 chips, FSDP)", "train images/s", "flux.1-dev",
             "v5p", "train", 8, 1.769, "1.769 s/step at global batch 8", _MAXDIFFUSION,
             fsdp=4, image_size=(1024, 1024)),
    _decode("Llama 2 7B decode, v5e-8 (8 chips, TP)", "llama-2-7b", 96, 3663, _JETSTREAM),
    _decode("Llama 2 13B decode, v5e-8 (8 chips, TP)", "llama-2-13b", 48, 2056, _JETSTREAM),
    _decode("Llama 3 8B decode, v5e-8 (8 chips, TP)", "llama-3-8b", 128, 8249, _JETSTREAM),
    _decode("Gemma 7B decode, v5e-8 (8 chips, TP)", "gemma-7b", 96, 3236, _JETSTREAM),
    Measured("SDXL 1024px, 20 steps, CFG, v5e-4 (4 chips, 1 image each)", "images/s",
             "sdxl-unet", "v5e", "forward", 8, 2.33, "4 images in 2.33 s", _SDXL_BLOG,
             data=4, image_size=(1024, 1024), steps=20, vae="sdxl-vae", images=1),
    Measured("SDXL 1024px, 20 steps, CFG, v4-8 (4 chips, 1 image each)", "images/s",
             "sdxl-unet", "v4", "forward", 8, 2.16, "4 images in 2.16 s", _SDXL_BLOG,
             data=4, image_size=(1024, 1024), steps=20, vae="sdxl-vae", images=1),
    Measured("Flux.1-dev 1024px, 28 steps, v6e-4 (4 chips, 1 image each)", "images/s",
             "flux.1-dev", "v6e", "forward", 4, 5.5, "4 images in 5.5 s", _MAXDIFFUSION,
             data=4, image_size=(1024, 1024), steps=28, vae="flux.1-vae", images=1),
    Measured("Flux.1-schnell 1024px, 4 steps, v6e-4 (4 chips, 1 image each)", "images/s",
             "flux.1-schnell", "v6e", "forward", 4, 0.8, "4 images in 0.8 s", _MAXDIFFUSION,
             data=4, image_size=(1024, 1024), steps=4, vae="flux.1-vae", images=1),
    Measured("Flux.1-dev 1024px, 28 steps, v4-8 (4 chips, 1 image each)", "images/s",
             "flux.1-dev", "v4", "forward", 4, 23.0, "4 images in 23 s", _MAXDIFFUSION,
             data=4, image_size=(1024, 1024), steps=28, vae="flux.1-vae", images=1),
)


@dataclass(frozen=True)
class Comparison:
    """A measurement beside its estimate: ``ratio`` = estimated / measured seconds;
    ``limit`` is the physical floor of the estimate (its FLOPs at peak, its bytes at full
    bandwidth, whichever is larger)."""

    row: Measured
    seconds: float
    limit: float
    bound: str

    @property
    def ratio(self) -> float:
        return self.seconds / self.row.seconds


def _plan(row: Measured, name: str, batch: int, image_size=None):
    return plan(config(name), chips=row.chips, generation=row.generation, batch=batch,
                seq=row.seq, dtype=torch.bfloat16, image_size=image_size, fsdp=row.fsdp,
                data=row.data)


def compare(row: Measured) -> Comparison:
    """Estimate ``row``'s run and set it beside the published time."""
    main = _plan(row, row.model, row.batch, row.image_size).estimate(row.task)
    parts = [(main, row.steps)]
    if row.vae:
        vae = _plan(row, row.vae, row.images * row.data, row.image_size).estimate("forward")
        parts.append((vae, 1))
    seconds = sum(e.seconds * n for e, n in parts)
    limit = sum(max(e.flops / e.chip.bf16_flops, e.hbm_bytes / e.chip.hbm_bandwidth) * n
                for e, n in parts)
    return Comparison(row, seconds, limit, main.bound)


def table(comparisons: list[Comparison]) -> str:
    """The comparisons as a Markdown table."""
    lines = ["| run | kind | published | measured s | estimate s | ratio | bound | source |",
             "|---|---|---|---:|---:|---:|---|---|"]
    for c in comparisons:
        r = c.row
        lines.append(f"| {r.label} | {r.kind} | {r.published} | {r.seconds:.4g} | "
                     f"{c.seconds:.4g} | {c.ratio:.2f} | {c.bound} | {r.source} |")
    return "\n".join(lines)
