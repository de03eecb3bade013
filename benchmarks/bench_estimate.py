"""Estimates: the time of planning and estimating a 70B training step without weights
(target: seconds, at most 10 s), and what estimating one small eager op costs next to running
it on the "tpu" device (the device's op log: at most 1.2x the op alone).

The 70B figure is Llama-3.1-70B's config on 64 v6e chips with FSDP, batch 128 x seq 8192: the
model is built on the meta device and one forward, backward and AdamW step is recorded and
costed, from scratch each repeat. The per-op figures time ``torch.add`` of two 64-element
"tpu" tensors alone, then followed by ``op_cost`` of its signature as a device would have
recorded it (the pure per-op function), then followed by building that signature from the
tensors and ``op_cost`` (both per op); interleaved, medians. The device's op log
(``tpu_lab.estimating``) is timed the same way: the op with the log off, and inside an
estimating block with it on (interleaved, medians), then what the block's end costs per op (the
records handed to Python as signatures) and the estimate of them (costed once, when asked).
Run: ``python benchmarks/bench_estimate.py [--quick]``.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import tpu_lab  # noqa: F401  (the "tpu" device)
from _record import quick, record
from tpu_lab.estimate import op_cost, signature
from tpu_lab.sharding import plan
from tpu_lab.sharding.published_configs import config
from tpu_lab.sharding.step_estimate import forget

aten = torch.ops.aten


def _seconds(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def plan_70b(repeats: int) -> None:
    def run():
        forget()
        p = plan(config("llama-3.1-70b"), chips=1, fsdp=64, generation="v6e", batch=128,
                 seq=8192, dtype=torch.bfloat16)
        return p.estimate("train")

    run()  # imports and first-use caches
    times = [_seconds(run) for _ in range(repeats)]
    record("estimate", "plan(70B config).estimate('train')", statistics.median(times), "s",
           target=10, note="Llama-3.1-70B, 64 x v6e FSDP, batch 128 x seq 8192, meta device")


def small_op(repeats: int, loops: int) -> None:
    x, y = torch.randn(64, device="tpu"), torch.randn(64, device="tpu")
    recorded = signature(aten.add.Tensor, (x, y), {}, torch.add(x, y))

    def alone():
        for _ in range(loops):
            torch.add(x, y)

    def costed():
        for _ in range(loops):
            torch.add(x, y)
            op_cost(recorded, "v6e")

    def signed():
        for _ in range(loops):
            out = torch.add(x, y)
            op_cost(signature(aten.add.Tensor, (x, y), {}, out), "v6e")

    runs = {"alone": alone, "costed": costed, "signed": signed}
    times: dict[str, list[float]] = {name: [] for name in runs}
    for fn in runs.values():
        fn()
    for _ in range(repeats):
        for name, fn in runs.items():
            times[name].append(_seconds(fn))
    per_op = 1e6 / loops
    base = statistics.median(times["alone"]) * per_op
    record("estimate", "small tpu op + op_cost (recorded signature)",
           statistics.median(times["costed"]) * per_op, "us", baseline=base,
           baseline_label="the tpu op alone", target=1.2,
           note="torch.add of two 64-element tpu tensors; the pure per-op function")
    record("estimate", "small tpu op + signature + op_cost",
           statistics.median(times["signed"]) * per_op, "us", baseline=base,
           baseline_label="the tpu op alone", target=1.2,
           note="the signature built from the tensors per op, then op_cost")


def op_log(repeats: int, loops: int) -> None:
    x, y = torch.randn(64, device="tpu"), torch.randn(64, device="tpu")

    def off():
        for _ in range(loops):
            torch.add(x, y)

    times: dict[str, list[float]] = {"off": [], "on": [], "end": [], "estimate": []}

    def on():
        block = tpu_lab.estimating()
        recording = block.__enter__()
        times["on"].append(_seconds(off))
        times["end"].append(_seconds(lambda: block.__exit__(None, None, None)))
        times["estimate"].append(_seconds(recording.estimate))

    off()
    for i in range(repeats):  # interleaved, each first in turn
        for run in (off, on) if i % 2 else (on, off):
            if run is off:
                times["off"].append(_seconds(off))
            else:
                on()
    per_op = 1e6 / loops
    base = statistics.median(times["off"]) * per_op
    record("estimate", "small tpu op, op log on (estimating block)",
           statistics.median(times["on"]) * per_op, "us", baseline=base,
           baseline_label="the op with the log off", target=1.2,
           note="torch.add of two 64-element tpu tensors, recorded by the compiled core")
    record("estimate", "end of an estimating block, per op",
           statistics.median(times["end"]) * per_op, "us",
           note="the records handed to Python as signatures and programs, once per block")
    record("estimate", "the block's estimate, per op",
           statistics.median(times["estimate"]) * per_op, "us",
           note="costed on the simulated chip when first asked for")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=2 if quick() else 5)
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    args = parser.parse_args()
    small_op(args.repeats * 3, 2000)
    op_log(args.repeats * 3, 2000)
    plan_70b(args.repeats)


if __name__ == "__main__":
    main()
