"""Published measurements beside the estimates for the same runs.

Each :class:`Measured` is one public figure (a training step, a decode throughput, an image
generation time) with the run's model config (:mod:`.published_configs`), chips, batch,
sequence length, activation checkpointing and dtype, and where it was published.
:func:`compare` estimates the same run with the one set of assumptions
(:mod:`tpu_lab.estimate.assumed`) and gives the ratios of the idealised time (an idealised chip
beats a real run: ratio < 1) and of the expected time to the measured one.

Two sets, kept apart: :data:`MEASUREMENTS`, the 16 runs the expected time's efficiencies are
fitted on (``scripts/fit_expected.py``), and :data:`HELD_OUT`, runs no fitted value ever sees,
which judge the fit. A run whose config offloads activations to the host (most MaxText recipes
of 2025-26) recomputes nothing: ``remat="none"``; ``"full"`` where the config says so.

Chips are counted as chips: "v4-8" and "v5p-8" name TensorCores (4 chips), "v5e-8" and
"v6e-256" name chips, and a TPU7x chip is two devices (the plan counts devices, so a 64-chip
TPU7x run is planned over 128).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..estimate.result import Estimate
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
    remat: str = "none"  # the run's activation checkpointing (tpu_lab.sharding.remat)

    @property
    def total_chips(self) -> int:
        return self.chips * self.fsdp * self.data


def _llm_train(label, model, gen, fsdp, per_chip, seq, seconds, published, source, data=1,
               chips=1, remat="none"):
    return Measured(label, "train tokens/s", model, gen, "train",
                    per_chip * chips * fsdp * data, seconds, published, source, chips=chips,
                    fsdp=fsdp, data=data, seq=seq, remat=remat)


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


_IRONWOOD = f"{RECIPES} training/ironwood/README.md @ d25b533d0448daa5b76ec77b628a020eaf87f618"
_TRILLIUM_AC = "@ ac200ebcc5d5f7af21a4759b4b50ae2fe4466cde"
_TRILLIUM_7E = "@ 7e88b6d146a00901446f8a11244d49a471d8242b"
_VLLM = (f"{RECIPES} inference/trillium/vLLM/Llama3.x/README.md @ "
         "b709d7342e6302a84337245770bee81e9d2a08fe")
_JETSTREAM_AT = (f"{_JETSTREAM} @ c81767f7f8668052a93a10aee91e019e4064d0eb")


def _llama_8b(chips: int, per_chip: int, seconds: float, line: str) -> Measured:
    return _llm_train(f"Llama 3.1 8B train, v6e-{chips} ({chips} chips, FSDP)", "llama-3.1-8b",
                      "v6e", chips, per_chip, 8192, seconds, line,
                      f"{TRILLIUM}/Llama3.1-8B-MaxText/v6e-{chips}/README.md {_TRILLIUM_AC}")


def _llama_70b(chips: int, per_chip: int, seconds: float, line: str) -> Measured:
    return _llm_train(f"Llama 3.1 70B train, v6e-{chips} ({chips} chips, FSDP)",
                      "llama-3.1-70b", "v6e", chips, per_chip, 8192, seconds, line,
                      f"{TRILLIUM}/Llama3.1-70B-MaxText/v6e-{chips}/README.md {_TRILLIUM_7E}")


_MAXTEXT_V5E = ("AI-Hypercomputer/maxtext README.md @ ebb226da831210cf6d6ff774aef937689bb1d612 "
                "(configs MaxText/configs/largest_job/16b.sh, 32b.sh: remat_policy=full)")

#: Published runs no fitted value sees (the held-out set), each with its source and the line
#: quoted from it; seconds are the line's step time, or the work one estimate covers (a decode
#: step: the time per output token; a generation: all its denoiser calls and a VAE decode).
HELD_OUT: tuple[Measured, ...] = (
    _llama_8b(16, 3, 3.393, "completed step: 14, seconds: 3.393 (global batch 48 x 8192)"),
    _llama_8b(64, 5, 5.652, "completed step: 14, seconds: 5.652 (global batch 320 x 8192)"),
    _llama_8b(128, 4, 4.602, "completed step: 14, seconds: 4.602 (global batch 512 x 8192)"),
    _llama_8b(256, 4, 4.546, "completed step: 14, seconds: 4.546 (global batch 1024 x 8192)"),
    _llama_70b(32, 2, 17.790, "completed step: 34, seconds: 17.790 (global batch 64 x 8192)"),
    _llama_70b(128, 4, 34.786, "completed step: 14, seconds: 34.786 (global batch 512 x 8192)"),
    _llama_70b(256, 5, 42.656, "completed step: 14, seconds: 42.656 (global batch 1280 x 8192)"),
    _llm_train("Mistral 7B train, v6e-8 (8 chips, FSDP)", "mistral-7b", "v6e", 8, 6, 8192,
               6.320, "completed step: 6, seconds: 6.320 (global batch 48 x 8192)",
               f"{TRILLIUM}/Mistral-7B-MaxText/README.md {_TRILLIUM_7E}"),
    _llm_train("GPT-3 175B train, v6e-256 (256 chips, FSDP, full remat)", "gpt-3-175b", "v6e",
               256, 3, 2048, 17.182, "completed step: 15, seconds: 17.182 (global batch 768 x "
               "2048, remat_policy full)",
               f"{TRILLIUM}/GPT3-175B-MaxText/bf16/README.md {_TRILLIUM_7E}", remat="full"),
    _llm_train("Llama 3.1 70B train, TPU7x 256 chips (512 devices, FSDP)", "llama-3.1-70b",
               "v7", 512, 2, 8192, 12.27, "| llama3.1-70b | 256 | 1024 | 8192 | bf16 | 12.27 |",
               _IRONWOOD),
    _llm_train("MaxText synthetic 32B train, v5p-128 (64 chips, TP 4 x FSDP 16)",
               "maxtext-synthetic-32b", "v5p", 16, 8, 2048, 9.92,
               "| 1x v5p-128 | 328 | 71.47% | (TFLOP/s/chip: 3252.4 TFLOP per chip per step / "
               "328 = 9.92 s, MaxText's FLOP formula of the day)",
               "AI-Hypercomputer/maxtext MaxText/configs/v5p/README.md @ "
               "76bd53b0f44caf989c88189afadeb1062f9254f0", chips=4, remat="dots"),
    Measured("Llama 3.3 70B decode, vLLM, v6e-8 (8 chips, TP), 64 at a time", "decode tokens/s",
             "llama-3.3-70b", "v6e", "decode", 64, 0.02535, "Mean TPOT (ms): 25.35 at "
             "max-concurrency 64", _VLLM, chips=8, seq=2000),
    Measured("Llama 3.3 70B decode, vLLM, v6e-8 (8 chips, TP), 128 at a time",
             "decode tokens/s", "llama-3.3-70b", "v6e", "decode", 128, 0.03512,
             "Mean TPOT (ms): 35.12 at max-concurrency 128", _VLLM, chips=8, seq=2000),
    _llm_train("MaxText synthetic 16B train, v5e-256 (256 chips, FSDP, full remat)",
               "maxtext-synthetic-16b", "v5e", 256, 6, 2048, 10.66,
               "| 1x v5e-256 | 120 | 61.10% | (TFLOP/s/chip of 16B: 1279.0 TFLOP per chip per "
               "step / 120 = 10.66 s, MaxText's FLOP formula of the day)", _MAXTEXT_V5E,
               remat="full"),
    _llm_train("MaxText synthetic 32B train, v5e-256 (256 chips, FSDP, full remat)",
               "maxtext-synthetic-32b", "v5e", 256, 4, 2048, 12.52,
               "| 1x v5e-256 | ... | 132 | 66.86% | (TFLOP/s/chip of 32B: 1652.6 TFLOP per chip "
               "per step / 132 = 12.52 s)", _MAXTEXT_V5E, remat="full"),
    Measured("Flux.1-schnell 1024px, 4 steps, v4-8 (4 chips, 1 image each)", "images/s",
             "flux.1-schnell", "v4", "forward", 4, 2.2, "| Flux-schnell | v4-8 | DDP | 4 | 4 | "
             "2.2 |", f"{_MAXDIFFUSION} @ 7cfb8801d41d1728f0232cd7ee59e900a151fecf", data=4,
             image_size=(1024, 1024), steps=4, vae="flux.1-vae", images=1),
)


#: Published figures that do not measure what an estimate covers, shown beside the held-out set
#: with the reason and kept out of it: JetStream's serving throughput at 64 and 1024 sequences
#: per chip counts the prefill of each ShareGPT prompt (up to 1024 tokens) in the time of its
#: output tokens, which a decode step's estimate does not.
NOT_COMPARABLE: tuple[Measured, ...] = (
    Measured("Gemma 2B decode, v5e-8 (8 chips, data parallel)", "decode tokens/s", "gemma-2b",
             "v5e", "decode", 512, 512 / 8700, "| TPU v5e-8 | bfloat16 | 512 | 2048 | 1024 | "
             "1024 | 8700 |", _JETSTREAM_AT, data=8, seq=2048),
    Measured("Gemma 2B decode, v5e-1 (1 chip)", "decode tokens/s", "gemma-2b", "v5e", "decode",
             1024, 1024 / 4249, "| TPU v5e-1 | bfloat16 | 1024 | 2048 | 1024 | 1024 | 4249 |",
             _JETSTREAM_AT, seq=2048),
)


@dataclass(frozen=True)
class Comparison:
    """A measurement beside its estimate: ``ratio`` = idealised / measured seconds,
    ``expected_ratio`` = expected / measured seconds; ``limit`` is the physical floor of the
    estimate (its FLOPs at peak, its bytes at full bandwidth, whichever is larger); ``parts``
    the estimates the run is made of, with how many times each runs."""

    row: Measured
    seconds: float
    limit: float
    bound: str
    expected: float
    parts: tuple[tuple[Estimate, int], ...] = ()

    @property
    def ratio(self) -> float:
        return self.seconds / self.row.seconds

    @property
    def expected_ratio(self) -> float:
        return self.expected / self.row.seconds


def _plan(row: Measured, name: str, batch: int, image_size=None):
    return plan(config(name), chips=row.chips, generation=row.generation, batch=batch,
                seq=row.seq, dtype=torch.bfloat16, image_size=image_size, fsdp=row.fsdp,
                data=row.data, remat=row.remat)


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
    expected = sum(e.expected_seconds * n for e, n in parts)
    return Comparison(row, seconds, limit, main.bound, expected, tuple(parts))


def table(comparisons: list[Comparison]) -> str:
    """The comparisons as a Markdown table."""
    lines = ["| run | published | measured s | idealised s | ratio | expected s | ratio | bound "
             "| source |", "|---|---|---:|---:|---:|---:|---:|---|---|"]
    for c in comparisons:
        r = c.row
        lines.append(f"| {r.label} | {r.published} | {r.seconds:.4g} | {c.seconds:.4g} | "
                     f"{c.ratio:.2f} | {c.expected:.4g} | {c.expected_ratio:.2f} | {c.bound} | "
                     f"{r.source} |")
    return "\n".join(lines)
