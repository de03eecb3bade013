"""One 32-step digit generation with the embedded model on the bundled "tpu" device: eager
against the UNet under ``torch.compile(backend="tpu", fullgraph=True, dynamic=False)``.

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
            generator=torch.Generator().manual_seed(0),
            output_type="pt",
        ).images
        images.cpu()  # wait for the device

    lowering = os.environ.get("TPU_LAB_COMPILE_LOWERING", "inductor")
    first = _timed(lambda: run(compiled))
    run(eager)
    times = {"eager": [], "compiled": []}
    for _ in range(repeats):
        times["eager"].append(_timed(lambda: run(eager)))
        times["compiled"].append(_timed(lambda: run(compiled)))
    e, c = statistics.median(times["eager"]), statistics.median(times["compiled"])
    print(f"digits: {STEPS}-step DDIM generation of {args.batch} digit(s) on the bundled 'tpu' "
          f"device, torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"compile lowering {lowering}, median of {repeats}")
    print(f"  first compiled call (compiles the UNet)  {first * 1e3:10.1f} ms")
    print(f"  eager                                    {e * 1e3:10.1f} ms")
    print(f"  compiled (torch.compile backend 'tpu')   {c * 1e3:10.1f} ms")
    print(f"  compiled / eager                         {c / e:10.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
