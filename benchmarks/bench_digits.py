"""One 32-step digit generation with the embedded model on the bundled "tpu" device: eager
against plain CPU PyTorch, and against the UNet under
``torch.compile(backend="tpu", fullgraph=True, dynamic=False)``.

The compiled side is warmed up first (its one compilation is timed and printed apart), then
both sides run interleaved, median of several repeats, so that a noisy machine moves both alike.
Run: ``python benchmarks/bench_digits.py`` (``--quick``: fewer repeats; ``--batch N``: N digits
per generation). The bundled device executes on the CPU: host timings, never TPU speed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

import tpu_lab  # noqa: F401  (installs the "tpu" device)
from _record import record
from tpu_lab.models import digits_pipeline
from tpu_lab.models.digits import DigitsPipeline

STEPS = 32


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--quick", action="store_true", help="3 repeats instead of 7")
    p.add_argument("--batch", type=int, default=1, help="digits per generation (default 1)")
    args = p.parse_args(argv)
    repeats = 3 if args.quick else 7
    cpu = digits_pipeline(device="cpu")
    cpu.set_progress_bar_config(disable=True)
    eager = digits_pipeline()
    eager.set_progress_bar_config(disable=True)
    compiled = DigitsPipeline(
        unet=torch.compile(eager.unet, backend="tpu", fullgraph=True, dynamic=False),
        scheduler=eager.scheduler,
    )
    compiled.set_progress_bar_config(disable=True)
    labels = [7] * args.batch

    def run(pipe):
        images = pipe(
            class_labels=labels,
            num_inference_steps=STEPS,
            guidance_scale=1.0,  # unguided, as in the figures before guidance defaulted to 1.5
            generator=torch.Generator().manual_seed(0),
            output_type="pt",
        ).images
        images.cpu()  # wait for the device

    lowering = os.environ.get("TPU_LAB_COMPILE_LOWERING", "inductor")
    first = _timed(lambda: run(compiled))
    run(eager), run(cpu)
    times = {"cpu": [], "eager": [], "compiled": []}
    for _ in range(repeats):
        times["cpu"].append(_timed(lambda: run(cpu)))
        times["eager"].append(_timed(lambda: run(eager)))
        times["compiled"].append(_timed(lambda: run(compiled)))
    median = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    what = f"{STEPS}-step digit generation (batch {args.batch})"
    record("digits", f"{what}, eager on tpu", median["eager"], "ms", baseline=median["cpu"])
    record(
        "digits",
        f"{what}, UNet compiled (backend tpu)",
        median["compiled"],
        "ms",
        baseline=median["eager"],
        baseline_label="eager on tpu",
        note=f"lowering {lowering}",
    )
    record("digits", "first compiled call (compiles the UNet)", first, "s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
