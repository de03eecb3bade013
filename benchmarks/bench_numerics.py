"""What the TPU numerics emulation and DEFER_NEVER's compile-cache counts cost on the device.

Every figure is a ratio of two timings taken in the same run, median of several repeats
(alternating blocks where a switch is flipped): "tpu" ops with the emulation on against off
(the cost of the bfloat16 passes); the device's small matmul against the CPU's after the
emulation was turned on and off again, against the same before it was ever on (what is left on
the default path: nothing). Run: ``python benchmarks/bench_numerics.py [--quick]``; one thread.
Host time on the simulated device: never TPU speed.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import tpu_lab  # noqa: F401  (installs the "tpu" device)
from _record import record


def _timed(fn, loops: int) -> float:
    start = time.perf_counter()
    for _ in range(loops):
        fn()
    return (time.perf_counter() - start) / loops


def alternating(fn, off, on, repeats: int, loops: int) -> tuple[float, float]:
    """Median seconds per call of ``fn`` with a switch off and on: blocks of ``loops`` calls
    in each state, alternating, each after one warm-up call; the switch is left off."""
    offs, ons = [], []
    for _ in range(repeats):
        off()
        fn()
        offs.append(_timed(fn, loops))
        on()
        fn()
        ons.append(_timed(fn, loops))
    off()
    return statistics.median(offs), statistics.median(ons)


def bench_emulation(repeats: int) -> None:
    from tpu_lab.device import emulation

    a, b = torch.randn(256, 256).to("tpu"), torch.randn(256, 256).to("tpu")
    layer = torch.nn.Linear(512, 512).to("tpu")
    x = torch.randn(64, 512).to("tpu")

    def matmul():
        torch.mm(a, b)

    def train_step():
        layer.zero_grad()
        layer(x).sum().backward()

    small_a, small_b = torch.randn(64, 64), torch.randn(64, 64)
    small_ta, small_tb = small_a.to("tpu"), small_b.to("tpu")

    def against_cpu() -> float:
        """The device's 64x64 matmul over the CPU's, median of alternating blocks."""
        ratios = []
        for _ in range(3 * repeats):
            cpu = _timed(lambda: torch.mm(small_a, small_b), 300)
            ratios.append(_timed(lambda: torch.mm(small_ta, small_tb), 300) / cpu)
        return statistics.median(ratios)

    never = against_cpu()  # before the emulation was ever on
    cases = (
        ("256x256 float32 matmul", matmul, 50),
        ("Linear(512, 512) forward+backward, batch 64", train_step, 10),
    )
    for name, fn, loops in cases:
        off_s, on_s = alternating(
            fn, lambda: emulation.emulate(False), emulation.emulate, repeats, loops
        )
        record(
            "numerics", f"{name}: emulation on (DEFAULT) vs off", on_s * 1e3,
            "ms", baseline=off_s * 1e3, baseline_label="emulation off",
        )  # fmt: skip
    after = against_cpu()
    record(
        "numerics", "64x64 matmul against the CPU's, emulation turned off again",
        after, "x CPU", baseline=never, baseline_label="never turned on",
        note="the default path: the same kernel",
    )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    args = parser.parse_args()
    # one thread: on a machine shared with other work, a thread pool waiting for a busy core
    # makes a matmul's time jump by 10x between calls
    torch.set_num_threads(1)
    repeats = 3 if args.quick else 9
    print(f"torch {torch.__version__}, 1 thread")
    bench_emulation(repeats)


if __name__ == "__main__":
    main()
