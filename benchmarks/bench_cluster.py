"""Time to a ready 4-chip cluster (v6e-4, one engine per chip) and to its first TP step.

Run: ``.venv/bin/python benchmarks/bench_cluster.py``. Prints figures measured in this run.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import torch

import tpu_lab  # noqa: F401
from tpu_lab.models import TINY_LLAMA
from tpu_lab.sharding import cluster as spmd

TP_STEP = """
import torch
from transformers import AutoModelForCausalLM
llama = AutoModelForCausalLM.from_pretrained({folder!r}, tp_plan="auto")
with torch.no_grad():
    logits = llama(torch.arange(12).reshape(1, 12).to("tpu")).logits
logits.shape
"""


def main() -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    folder = Path(tempfile.mkdtemp()) / "llama"
    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(**{**TINY_LLAMA, "num_key_value_heads": 4})).save_pretrained(
        folder
    )
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
    print(
        f"cluster of 4 ready (controller + 4 engines + 'tpu_dist' group): {ready:6.2f} s"
        f"  (target <= 10 s)"
    )
    print(f"first TP=4 step (load tiny Llama tp_plan='auto' + forward):    {first_step:6.2f} s")
    print(
        f"ready + first TP step:                                          "
        f"{ready + first_step:6.2f} s  (spike: ~8 s with gloo)"
    )
    print(f"warm TP=4 forward cell:                                         {warm_step:6.2f} s")
    print(f"empty cell round trip:                                          {empty_cell:6.3f} s")
    print(f"restart:                                                        {restarted:6.2f} s")
    print(f"stop (no process left):                                         {stopped:6.2f} s")


if __name__ == "__main__":
    main()
