"""Time to a ready cluster and its memory (v6e-4: one host; v6e-16: a simulated pod slice of 4
hosts of 4 chips, 16 engines on this machine), the first TP=4 step of a v6e-4, and one training
step with TP=4 within each host and DP=4 across hosts against the same step in one process.

Run: ``.venv/bin/python benchmarks/bench_cluster.py``. Prints figures measured in this run.
Memory: resident (RSS) and unique (USS, what each process alone holds; the engines share the
pages of the fork server that imported torch) of every process of the cluster, added up.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import tpu_lab  # noqa: F401
from _record import record
from tpu_lab.launch import cluster as spmd
from tpu_lab.models import save_tiny_llama

MiB = float(1 << 20)

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

TP_DP_LOAD = """
import time, torch, torch.distributed as dist
from transformers import AutoModelForCausalLM
from tpu_lab.sharding.hybrid import average_gradients, host_mesh, tensor_parallel
mesh = host_mesh()
llama = tensor_parallel(AutoModelForCausalLM.from_pretrained({folder!r}).to("tpu"), mesh)
hosts = mesh.size(0)
tokens = (torch.arange(hosts * 12).reshape(hosts, 12) * 7) % 256
mine = tokens[mesh.get_local_rank("dp")].unsqueeze(0).to("tpu")
"""

TP_DP_STEP = """
llama.zero_grad()
loss = llama(mine, labels=mine).loss
loss.backward()
average_gradients(llama, mesh)
dist.barrier()
"""


def _memory(cluster) -> tuple[float, float]:
    procs = cluster.processes()
    rss = sum(p.memory_info().rss for p in procs) / MiB
    uss = sum(p.memory_full_info().uss for p in procs) / MiB
    return rss, uss


def _ready(topology: str, target: float):
    started = time.perf_counter()
    cluster = spmd.start(topology)
    ready = time.perf_counter() - started
    record("cluster", f"{topology} cluster ready ({cluster.world_size} engines, tpu_dist)",
           ready, "s", target=target)  # fmt: skip
    rss, uss = _memory(cluster)
    note = f"{len(cluster.processes())} processes; RSS {rss:.0f} MiB"
    record("cluster", f"{topology} cluster memory (USS, all processes)", uss, "MiB", note=note)
    return cluster


def one_host(folder: Path) -> None:
    cluster = _ready("v6e-4", 5.0)
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
    record("cluster", "first TP=4 step (load tiny Llama with tp_plan auto, forward)",
           first_step, "s")
    record("cluster", "warm TP=4 forward cell", warm_step, "s")
    record("cluster", "empty cell round trip", empty_cell, "s")
    record("cluster", "restart", restarted, "s")
    record("cluster", "stop (no process left)", stopped, "s")


def pod(folder: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    cluster = _ready("v6e-16", 15.0)
    try:
        cluster.run_cell(TP_DP_LOAD.format(folder=str(folder)))
        cluster.run_cell(TP_DP_STEP)  # the first step builds what later steps reuse
        steps = []
        for _ in range(3):
            started = time.perf_counter()
            cluster.run_cell(TP_DP_STEP)
            steps.append(time.perf_counter() - started)
    finally:
        spmd.stop()
    one = AutoModelForCausalLM.from_pretrained(folder)
    tokens = (torch.arange(4 * 12).reshape(4, 12) * 7) % 256
    base = []
    for _ in range(4):
        started = time.perf_counter()
        one.zero_grad()
        one(tokens, labels=tokens).loss.backward()
        base.append(time.perf_counter() - started)
    record("cluster", "v6e-16 TP=4 x DP=4 training step (tiny Llama)", min(steps) * 1e3, "ms",
           baseline=min(base[1:]) * 1e3, baseline_label="one CPU process",
           note="16 engines on 2 cores; the cell's round trip included")  # fmt: skip


def main() -> None:
    folder = save_tiny_llama(Path(tempfile.mkdtemp()) / "llama", num_key_value_heads=4)
    one_host(folder)
    pod(folder)


if __name__ == "__main__":
    main()
