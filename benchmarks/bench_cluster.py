"""Time to a ready 4-chip cluster (v6e-4, one engine per chip) and to its first TP step.

Run: ``.venv/bin/python benchmarks/bench_cluster.py``. Prints figures measured in this run.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import tpu_lab  # noqa: F401
from _record import record
from tpu_lab.launch import cluster as spmd
from tpu_lab.models import save_tiny_llama

TP_STEP = """
import torch
from transformers import AutoModelForCausalLM
from transformers import DistributedConfig
llama = AutoModelForCausalLM.from_pretrained(
    {folder!r}, distributed_config=DistributedConfig(tp_plan="auto"))
with torch.no_grad():
    logits = llama(torch.arange(12).reshape(1, 12).to("tpu")).logits
logits.shape
"""


def main() -> None:
    folder = save_tiny_llama(Path(tempfile.mkdtemp()) / "llama", num_key_value_heads=4)
    started = time.perf_counter()
    cluster = spmd.start("v6e-4")
    ready = time.perf_counter() - started
    try:
        step = time.perf_counter()
        cluster.run_cell(TP_STEP.format(folder=str(folder)))
        first_step = time.perf_counter() - step
        again = time.perf_counter()
        cluster.run_cell(
            "with torch.no_grad():\n    llama(torch.arange(12).reshape(1, 12).to('tpu'))"
        )
        warm_step = time.perf_counter() - again
        empty = time.perf_counter()
        cluster.run_cell("pass")
        empty_cell = time.perf_counter() - empty
        restart = time.perf_counter()
        spmd.restart()
        restarted = time.perf_counter() - restart
    finally:
        stop = time.perf_counter()
        spmd.stop()
        stopped = time.perf_counter() - stop
    record("cluster", "cluster of 4 ready (controller, engines, tpu_dist group)", ready, "s",
           target=10.0)
    record("cluster", "first TP=4 step (load tiny Llama with tp_plan auto, forward)",
           first_step, "s")
    record("cluster", "warm TP=4 forward cell", warm_step, "s")
    record("cluster", "empty cell round trip", empty_cell, "s")
    record("cluster", "restart", restarted, "s")
    record("cluster", "stop (no process left)", stopped, "s")

if __name__ == "__main__":
    main()
