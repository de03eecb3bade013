"""The "tpu_dist" backend never hangs a rank, however its threads are scheduled.

Gloo runs each collective on a worker thread, which drops its last reference to the finished
collective while it holds gloo's queue lock; when the collective's tensors are also held by
Python, dropping them needs the GIL. A rank whose main thread then enqueued its next collective
with the GIL held (PyTorch's functional all-gather, which DTensor and tensor parallelism call,
reached gloo that way) waited for the lock while the worker waited for the GIL: the rank hung
for good and the other ranks timed out ("Timed out waiting 120000ms for recv operation to
complete"). That failed notebook 03 on a busy machine, where the worker thread is often
descheduled between finishing a collective and dropping it.

Here that interleaving is forced on every step. Each rank runs on one CPU, with the threads
that the process group started (gloo's workers) at idle priority: they run only while the main
thread sleeps. The peer joins an all-reduce late, and the main thread sleeps holding the GIL, so
gloo's worker finishes the all-reduce and waits for the GIL holding the queue lock; then the main
thread calls the functional all-gather, and the worker cannot take the GIL in the moment that
call lets it go (the main thread keeps the CPU). The old backend hung within three steps.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("torch.distributed")

RANK = textwrap.dedent(
    """
    import ctypes, os, sys, time
    from datetime import timedelta

    import torch
    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol

    import tpu_lab  # noqa: F401  (the "tpu" device)
    from tpu_lab.launch.tpu_dist import register

    rank, store = int(sys.argv[1]), sys.argv[2]
    before = set(os.listdir("/proc/self/task"))
    dist.init_process_group(register(), store=dist.FileStore(store, 2), rank=rank,
                            world_size=2, timeout=timedelta(seconds=10))
    cpus = sorted(os.sched_getaffinity(0))
    for tid in os.listdir("/proc/self/task"):
        os.sched_setaffinity(int(tid), {cpus[rank % len(cpus)]})
        if tid not in before:  # the process group's threads
            os.sched_setscheduler(int(tid), os.SCHED_IDLE, os.sched_param(0))
    sleep_holding_the_gil = ctypes.PyDLL(None).usleep
    group = dist.group.WORLD
    held = torch.ones(1 << 16, device="tpu")  # Python holds it: dropping it needs the GIL
    x = torch.arange(4.0) + 10 * rank
    for step in range(4):
        dist.barrier()
        if rank == 1:
            time.sleep(0.2)  # rank 0's all-reduce finishes while rank 0 sleeps below
        dist.all_reduce(held, async_op=True)  # the work is dropped: gloo's worker drops it last
        sleep_holding_the_gil(500_000)
        out = torch.ops._c10d_functional.all_gather_into_tensor(x, 2, group.group_name)
        gathered = torch.ops._c10d_functional.wait_tensor(out)

    t = torch.arange(4.0, device="tpu") + 10 * rank
    print({
        "held": held[:2].tolist(),
        "gathered": gathered.tolist(),
        "all_gather": funcol.all_gather_single(t, 0, group).tolist(),
        "reduce_scatter": funcol.reduce_scatter_tensor(t, "sum", 0, group).tolist(),
        "all_reduce": funcol.all_reduce(t, "sum", group).tolist(),
        "all_to_all": funcol.all_to_all_single(t, None, None, group).tolist(),
        "broadcast": funcol.broadcast(t, 0, group).tolist(),
        "coalesced": [y.tolist() for y in funcol.all_gather_into_tensor_coalesced([t, t * 2], group)],
    }, flush=True)
    os._exit(0)  # as the cluster's engines do: gloo's threads can abort the interpreter's exit
    """
)


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="needs Linux thread scheduling")
def test_a_collective_after_gloo_finished_another_does_not_hang_the_rank(tmp_path):
    ranks = [
        subprocess.Popen(
            [sys.executable, "-c", RANK, str(rank), str(tmp_path / "store")],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in (0, 1)
    ]
    results = []
    try:
        for rank, proc in enumerate(ranks):
            try:
                out, err = proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                pytest.fail(f"rank {rank} hung: its main thread and gloo's worker deadlocked")
            assert proc.returncode == 0, f"rank {rank} failed:\n{err[-3000:]}"
            results.append(ast.literal_eval(out.strip().splitlines()[-1]))
    finally:
        for proc in ranks:
            proc.kill()
            proc.wait()
    x0, x1 = [0.0, 1.0, 2.0, 3.0], [10.0, 11.0, 12.0, 13.0]
    total = [a + b for a, b in zip(x0, x1, strict=True)]
    for rank, got in enumerate(results):
        half = slice(2 * rank, 2 * rank + 2)
        assert got == {
            "held": [16.0, 16.0],  # four all-reduces of ones over two ranks
            "gathered": x0 + x1,
            "all_gather": x0 + x1,
            "reduce_scatter": total[half],
            "all_reduce": total,
            "all_to_all": x0[half] + x1[half],
            "broadcast": x0,
            "coalesced": [x0 + x1, [2 * v for v in x0 + x1]],
        }, rank
