"""The peak HBM costs no more than 1.2x the estimate it comes with: one recording serves both.

    python benchmarks/bench_peak.py [--baseline REV] [--repeats N] [--quick]

A plan's training step is estimated from scratch (its recording dropped first) in this checkout,
where the estimate carries the step's peak HBM (the recording keeps each buffer's life), and at
``REV`` (default: the revision before the peak), where it did not: the same config, chips and
step in fresh processes, interleaved; each process times several estimates and prints the
median. The config: Llama-3.1-8B's (32 layers) trained on 8 v6e chips with FSDP, batch 8 x 4096
tokens, bfloat16, on the meta device.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _record import quick, record
from _revisions import ROOT, checkout

#: The last revision whose estimate had no peak HBM (issue 40).
BEFORE_PEAK = "b7fc6a0"

RUN = """
import statistics, sys, time, torch
import tpu_lab
from tpu_lab.sharding import plan
from tpu_lab.sharding.published_configs import config
from tpu_lab.sharding.step_estimate import forget
times = []
for _ in range(int(sys.argv[1])):
    forget()
    p = plan(config("llama-3.1-8b"), chips=1, fsdp=8, generation="v6e", batch=8, seq=4096,
             dtype=torch.bfloat16)
    start = time.perf_counter()
    p.estimate("train")
    times.append(time.perf_counter() - start)
print(statistics.median(times))
"""


def _seconds(path: Path, repeats: int) -> float:
    env = {**os.environ, "PYTHONPATH": str(path), "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}
    done = subprocess.run([sys.executable, "-W", "ignore", "-c", RUN, str(repeats)], env=env,
                          capture_output=True, text=True, check=True, cwd=path)
    return float(done.stdout.split()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default=BEFORE_PEAK, help="a git revision")
    parser.add_argument("--repeats", type=int, default=2 if quick() else 5,
                        help="processes of each, interleaved")
    parser.add_argument("--quick", action="store_true", help="2 processes of each")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        before = checkout(args.baseline, Path(tmp))
        times: dict[str, list[float]] = {"before": [], "now": []}
        for _ in range(args.repeats):
            times["before"].append(_seconds(before, 3))
            times["now"].append(_seconds(ROOT, 3))
    record("peak", "a 32-layer train estimate with its peak HBM",
           statistics.median(times["now"]), "s", baseline=statistics.median(times["before"]),
           baseline_label=f"the estimate at {args.baseline}", target=1.2,
           note=f"Llama-3.1-8B, 8 x v6e FSDP, batch 8 x 4096; medians of {args.repeats} "
                "interleaved processes")


if __name__ == "__main__":
    main()
