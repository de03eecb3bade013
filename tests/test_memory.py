"""HBM accounting per chip and the out-of-memory error."""

from __future__ import annotations

import gc

import pytest
import torch

import tpu_lab
from tpu_lab.device import current
from tpu_lab.units import format_bytes

MiB = 1 << 20


@pytest.fixture
def small_chip():
    """A v5e chip (16 GiB) with no tensors of other tests on it."""
    gc.collect()
    previous = current().chip.topology.name
    tpu_lab.use_topology("v5e-1")
    yield current().chip
    gc.collect()
    tpu_lab.use_topology(previous)


def test_live_and_peak_bytes_are_exact(small_chip):
    base = small_chip.stats().live
    small_chip.reset_peak()
    x = torch.empty(4 * MiB, dtype=torch.uint8, device="tpu")
    assert small_chip.stats().live == base + 4 * MiB
    y = x.view(2, -1)[:, :10]  # views cost nothing
    assert small_chip.stats().live == base + 4 * MiB
    z = torch.zeros(MiB, dtype=torch.float32, device="tpu")  # 4 MiB
    assert small_chip.stats().live == base + 8 * MiB
    del x, z
    assert small_chip.stats().live == base + 4 * MiB  # y keeps x's storage alive
    del y
    assert small_chip.stats().live == base
    assert small_chip.stats().peak == base + 8 * MiB
    assert torch.accelerator.memory_allocated() == base
    assert torch.accelerator.max_memory_allocated() == base + 8 * MiB
    free, total = torch.accelerator.get_memory_info()
    assert total == 16 << 30 and free == total - base


def test_oom_is_raised_before_host_memory_and_accounting_stays_exact(small_chip):
    before = small_chip.stats()
    with pytest.raises(torch.OutOfMemoryError) as info:
        # 20 GiB on a 16 GiB chip: must fail without touching 20 GiB of host memory
        torch.empty(20 << 30, dtype=torch.uint8, device="tpu")
    message = str(info.value)
    used = before.live
    assert message.startswith(
        "RESOURCE_EXHAUSTED: TPU out of memory allocating 20.00 GiB on tpu:0 (TPU v5e (simulated), "
        "v5e-1). Ran out of memory in memory space hbm. Used "
        f"{format_bytes(used)} of 16.00 GiB hbm. Exceeded hbm capacity by "
        f"{format_bytes(used + (4 << 30))}."
    )
    assert "Free tensors you no longer need" in message
    after = small_chip.stats()
    assert after.live == before.live and after.ooms == before.ooms + 1
    # the device is still usable and the accounting exact afterwards
    x = torch.ones(MiB, device="tpu")
    assert small_chip.stats().live == before.live + 4 * MiB
    del x
    assert small_chip.stats().live == before.live


def test_oom_when_the_chip_fills_up(small_chip):
    base = small_chip.stats().live  # tensors earlier tests still hold (e.g. IPython's Out)
    held = []
    with pytest.raises(torch.OutOfMemoryError):
        for _ in range(5):  # 5 x 4 GiB > 16 GiB; payloads of empty tensors stay untouched
            held.append(torch.empty(4 << 30, dtype=torch.uint8, device="tpu"))
    assert len(held) == ((16 << 30) - base) // (4 << 30)
    assert small_chip.stats().live == base + len(held) * (4 << 30)
    held.clear()
    gc.collect()
    assert small_chip.stats().live == base


def test_oom_on_transfer_and_on_computed_results(small_chip):
    before = small_chip.stats().live
    big = torch.empty((16 << 30) - 64 * MiB - before, dtype=torch.uint8, device="tpu")
    host = torch.empty(8 << 30, dtype=torch.uint8)
    with pytest.raises(torch.OutOfMemoryError):
        host.to("tpu")  # checked before the device buffer is allocated
    small = torch.ones(40 * MiB, dtype=torch.uint8, device="tpu")
    with pytest.raises(torch.OutOfMemoryError, match="allocating 40.00 MiB on tpu:0"):
        small.clone()  # computed results are checked before they are put on the device
    del big, host, small
    assert small_chip.stats().live == before


def test_switching_to_a_smaller_chip_that_cannot_hold_the_tensors_is_refused(small_chip):
    tpu_lab.use_topology("v6e-1")
    x = torch.empty(17 << 30, dtype=torch.uint8, device="tpu")
    held = format_bytes(current().chip.stats().live)
    with pytest.raises(tpu_lab.TopologyError, match=f"Cannot switch to v5e-1: {held} of tensors"):
        tpu_lab.use_topology("v5e-1")
    assert current().chip.topology.name == "v6e-1"
    del x


def test_checking_a_size_reserves_nothing_and_counts_only_a_refusal(small_chip):
    small_chip.reset_peak()
    before = small_chip.stats()
    allocations = torch.accelerator.memory_stats()["allocation.all.allocated"]
    small_chip.check(8 << 30)  # fits: no charge, no allocation, no new peak
    after = small_chip.stats()
    assert (after.live, after.peak) == (before.live, before.peak)
    assert torch.accelerator.memory_stats()["allocation.all.allocated"] == allocations
    with pytest.raises(torch.OutOfMemoryError, match="RESOURCE_EXHAUSTED"):
        small_chip.check(32 << 30)
    assert small_chip.stats().ooms == before.ooms + 1
    assert small_chip.stats().live == before.live


def test_reset_accumulated_memory_stats_zeroes_the_counts_not_the_bytes(small_chip):
    x = torch.empty(MiB, dtype=torch.uint8, device="tpu")
    with pytest.raises(torch.OutOfMemoryError):
        torch.empty(20 << 30, dtype=torch.uint8, device="tpu")
    before = torch.accelerator.memory_stats()
    assert before["allocation.all.allocated"] > 0 and before["num_ooms"] > 0
    torch.accelerator.reset_accumulated_memory_stats()
    after = torch.accelerator.memory_stats()
    assert (after["allocation.all.allocated"], after["num_ooms"]) == (0, 0)
    assert after["allocated_bytes.all.current"] == before["allocated_bytes.all.current"]
    assert after.get("allocation.all.current") == before.get("allocation.all.current")
    stats = small_chip.stats()
    assert (stats.allocations, stats.ooms) == (0, 0) and stats.live >= MiB
    y = torch.empty(MiB, dtype=torch.uint8, device="tpu")
    assert torch.accelerator.memory_stats()["allocation.all.allocated"] == 1
    with pytest.raises(torch.OutOfMemoryError):
        torch.empty(20 << 30, dtype=torch.uint8, device="tpu")
    small_chip.reset_accumulated()  # the chip's own reset, on either core
    assert (small_chip.stats().allocations, small_chip.stats().ooms) == (0, 0)
    del x, y
