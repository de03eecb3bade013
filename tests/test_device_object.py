"""The device object of a process (``tpu_lab.device.current()``): one owner of the chip, the
compile cache, the recording of DEFER_AND_FUSE and the settings, whose blocks are context
variables (a block in one thread or task leaves the others alone)."""

from __future__ import annotations

import asyncio
import threading

import torch

import tpu_lab  # noqa: F401  (installs the "tpu" device)
from tpu_lab import device
from tpu_lab.device import emulation
from tpu_lab.device.modes import EagerMode, Precision


def test_one_device_object_owns_the_state():
    tpu = device.current()
    assert device.current() is tpu and device.exists()
    assert torch.tpu.default_generators[0] is tpu.generator
    assert torch.tpu.get_device_name() == tpu.chip.name
    assert tpu_lab.status().memory == tpu.chip.stats()


def _in_threads(*targets) -> None:
    errors = []

    def run(target):
        try:
            target()
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(t,)) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors


def test_precision_blocks_in_two_threads_do_not_interfere():
    """Each thread sees its own innermost block while the other's is open, and its float32
    matmuls compute at its own precision (the TPU numerics emulation)."""
    a, b = torch.randn(16, 64), torch.randn(64, 8)
    ta, tb = a.tpu(), b.tpu()
    both_open = threading.Barrier(2)
    seen = {}

    def at(precision):
        def body():
            with torch.tpu.precision(precision):
                both_open.wait(timeout=30)
                seen[precision] = (device.current().precision, (ta @ tb).cpu())
                both_open.wait(timeout=30)
            assert device.current().precision is Precision.DEFAULT

        return body

    previous = emulation.emulate(True)
    try:
        _in_threads(at(Precision.HIGH), at(Precision.HIGHEST))
    finally:
        emulation.emulate(previous)
    assert seen[Precision.HIGH][0] is Precision.HIGH
    assert seen[Precision.HIGHEST][0] is Precision.HIGHEST
    assert torch.equal(seen[Precision.HIGHEST][1], a @ b)  # all 24 bits: the CPU's float32
    assert not torch.equal(seen[Precision.HIGH][1], a @ b)  # three bfloat16 passes


def test_eager_mode_blocks_record_per_thread():
    """A thread in DEFER_AND_FUSE records its ops into its own graph while another thread runs
    op by op: one graph at the fusing thread's sync point, the other's ops counted singly."""
    x = torch.ones(8, device="tpu")
    torch.tpu._clear_cache()
    both_open = threading.Barrier(2)

    def fusing():
        with torch.tpu.set_eager_mode(EagerMode.DEFER_AND_FUSE):
            both_open.wait(timeout=30)
            y = x * 2 + 1
            both_open.wait(timeout=30)
            assert device.current().eager_mode is EagerMode.DEFER_AND_FUSE
            y.sum().item()

    def op_by_op():
        both_open.wait(timeout=30)
        assert device.current().eager_mode is EagerMode.DEFER_NEVER
        (x - 3).abs()
        both_open.wait(timeout=30)

    _in_threads(fusing, op_by_op)
    stats = torch.tpu._get_cache_stats()
    graphs = device.current().cache.entries
    assert len(graphs) == 1
    (ops,) = [entry.ops for entry in graphs.values()]
    names = [name.partition(".")[0] for name, _ in ops]
    assert names == ["mul", "add", "sum", "_local_scalar_dense"]
    assert stats.num_compilations == 1 + 2  # the graph, and sub and abs as single ops
    assert torch.tpu.eager_mode is EagerMode.DEFER_NEVER


def test_blocks_in_asyncio_tasks_are_their_own():
    async def task(precision, started, other_started):
        with torch.tpu.precision(precision):
            started.set()
            await other_started.wait()
            return device.current().precision

    async def main():
        first, second = asyncio.Event(), asyncio.Event()
        return await asyncio.gather(
            task(Precision.HIGH, first, second), task(Precision.HIGHEST, second, first)
        )

    assert asyncio.run(main()) == [Precision.HIGH, Precision.HIGHEST]
    assert device.current().precision is Precision.DEFAULT
