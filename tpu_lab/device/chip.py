"""The simulated chip this process drives: its topology and its HBM.

Device memory is host memory: the compiled core's allocator charges every "tpu" storage to the
chip's HBM before it allocates and releases it when the storage dies, so the accounting is
exact. This object holds the topology, reads the core's counts and words the errors.
"""

from __future__ import annotations

from ..hardware.topology import Topology
from ..units import MemoryStats, format_bytes
from .core import Core


class Chip:
    """The one chip of the topology that this process drives (TorchTPU: one chip per process)."""

    def __init__(self, core: Core, topology: Topology, publish) -> None:
        self._core = core
        self._publish = publish
        self.topology = topology
        self.index = 0
        core.set_capacity(topology.hbm_per_device)
        core.set_oom_wording(self._oom)

    @property
    def name(self) -> str:
        return f"{self.topology.generation.display_name} (simulated)"

    @property
    def capacity(self) -> int:
        return self.topology.hbm_per_device

    def use(self, topology: Topology) -> None:
        """Switch the simulated topology; live tensors keep their bytes on the new chip."""
        self.topology = topology
        self._core.set_capacity(topology.hbm_per_device)

    def stats(self) -> MemoryStats:
        capacity, live, peak, allocations, ooms = self._core.stats()
        return MemoryStats(capacity, live, peak, allocations, ooms)

    def charge(self, nbytes: int) -> None:
        """Reserve ``nbytes`` of HBM or raise ``torch.OutOfMemoryError`` (nothing reserved)."""
        self._core.charge(nbytes)

    def check(self, nbytes: int) -> None:
        """Raise ``torch.OutOfMemoryError`` if ``nbytes`` more would not fit (reserves nothing)."""
        self._core.check(nbytes)

    def release(self, nbytes: int) -> None:
        self._core.release(nbytes)

    def reset_peak(self) -> None:
        self._core.reset_peak()

    def reset_accumulated(self) -> None:
        """Zero the counts of allocations and out-of-memory errors (not the bytes held)."""
        self._core.reset_accumulated()

    def _oom(self, nbytes: int, live: int, capacity: int) -> str:
        excess = live + nbytes - capacity
        message = (
            f"RESOURCE_EXHAUSTED: TPU out of memory allocating {format_bytes(nbytes)} on tpu:0 "
            f"({self.name}, {self.topology.name}). Ran out of memory in memory space hbm. "
            f"Used {format_bytes(live)} of {format_bytes(capacity)} hbm. Exceeded hbm "
            f"capacity by {format_bytes(excess)}. Free tensors you no longer need (del them), "
            "use a smaller batch or dtype (bfloat16), shard the model over more chips, or "
            f"choose a generation with more HBM (tpu_lab.use_topology('v5p-1'))."
        )
        self._publish("oom", nbytes=nbytes, message=message)
        return message
