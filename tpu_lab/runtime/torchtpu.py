"""The runtime adapter for Google's TorchTPU on real TPU hardware.

Only the public ``torch.tpu`` API and the private names TorchTPU's own docs use are called.
Verified against the torch-tpu 0.2.0 Python API without hardware; the numbers themselves
(memory, topology) are verified only on a TPU VM (see the README).
"""

from __future__ import annotations

import torch

from ..device.driver import MemoryStats
from ..errors import TopologyError
from .base import Backend, DeviceStatus


class TorchTPUBackend(Backend):
    name = "torchtpu"
    simulated = False

    def memory(self) -> MemoryStats:
        tpu = torch.tpu
        capacity = tpu.get_device_properties(0).total_memory
        live = tpu.memory_allocated(0) if hasattr(tpu, "memory_allocated") else 0
        peak = tpu.max_memory_allocated(0) if hasattr(tpu, "max_memory_allocated") else live
        return MemoryStats(capacity=capacity, live=live, peak=peak, allocations=0, ooms=0)

    def status(self) -> DeviceStatus:
        tpu = torch.tpu
        mesh = _host_topology()
        return DeviceStatus(
            backend=f"TorchTPU {_version()}",
            simulated=False,
            device_name=tpu.get_device_name(0),
            topology=mesh[0],
            topology_shape=mesh[1],
            chips=mesh[2],
            devices_in_process=tpu.device_count(),
            memory=self.memory(),
            eager_mode=getattr(tpu.eager_mode, "name", str(tpu.eager_mode)),
        )

    def use_topology(self, name: str) -> str:
        raise TopologyError(
            f"Cannot choose the topology {name!r} on a real TPU: the hardware decides "
            f"({self.status().topology}). Topologies can be chosen on the bundled device only."
        )


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("torch-tpu")
    except PackageNotFoundError:
        return "(version unknown)"


def _host_topology() -> tuple[str, tuple[int, ...], int]:
    """(name, shape, chips) of the host, from the environment libtpu reads."""
    import os

    name = os.environ.get("TPU_ACCELERATOR_TYPE", "unknown")
    bounds = os.environ.get("TPU_CHIPS_PER_HOST_BOUNDS", "")
    shape = tuple(int(x) for x in bounds.split(",") if x.strip().isdigit())
    chips = 1
    for d in shape:
        chips *= d
    return name, shape, chips
