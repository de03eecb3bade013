"""The interface both runtime adapters implement, and the status record they return."""

from __future__ import annotations

import abc
from dataclasses import dataclass

from ..device.driver import MemoryStats, format_bytes


@dataclass(frozen=True)
class DeviceStatus:
    """What a user asks first: which backend, which chip, how much HBM is in use."""

    backend: str
    simulated: bool
    device_name: str
    topology: str
    topology_shape: tuple[int, ...]
    chips: int
    devices_in_process: int
    memory: MemoryStats
    eager_mode: str

    def __str__(self) -> str:
        kind = "simulated on the CPU" if self.simulated else "hardware"
        m = self.memory
        return (
            f"backend   {self.backend} ({kind})\n"
            f"device    tpu:0 = {self.device_name}\n"
            f"topology  {self.topology} {self.topology_shape}, {_chips(self.chips)}; "
            f"this process drives {self.devices_in_process}\n"
            f"HBM       {_usage(m)}\n"
            f"eager     {self.eager_mode}"
        )


def _chips(n: int) -> str:
    return f"{n} chip" if n == 1 else f"{n} chips"


def _usage(m: MemoryStats) -> str:
    if not m.measured:
        return f"{format_bytes(m.capacity)} per chip; usage not reported by this backend"
    return (
        f"{format_bytes(m.live)} / {format_bytes(m.capacity)} in use, peak {format_bytes(m.peak)}"
    )


class Backend(abc.ABC):
    """One way of running "tpu" tensors: real TorchTPU or the bundled device."""

    name: str
    simulated: bool

    @abc.abstractmethod
    def status(self) -> DeviceStatus:
        """A snapshot of the device this process drives."""

    @abc.abstractmethod
    def memory(self) -> MemoryStats:
        """HBM of ``tpu:0`` in bytes."""

    @abc.abstractmethod
    def use_topology(self, name: str) -> str:
        """Choose the topology (bundled device only); returns its description."""

    def cache_stats(self) -> dict[str, int]:
        """The eager compile cache (DEFER_AND_FUSE): TorchTPU's counters on both backends."""
        import torch

        tpu = torch.tpu
        return {
            "requests": tpu._get_cache_requests(),
            "hits": tpu._get_cache_hits(),
            "misses": tpu._get_cache_misses(),
        }

    def synchronize(self) -> None:
        import torch

        torch.accelerator.synchronize()
