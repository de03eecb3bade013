"""The runtime adapter for Google's TorchTPU on real TPU hardware.

Only the public ``torch.tpu`` API and the private names TorchTPU's own docs use are called.
Verified against the torch-tpu 0.2.0 Python API without hardware; the numbers themselves
(memory, topology) are verified only on a TPU VM (see the README).
"""

from __future__ import annotations

import math

import torch

from ..bus import BUS
from ..errors import TopologyError
from ..units import MemoryStats
from .base import Backend, DeviceStatus


class TorchTPUBackend(Backend):
    name = "torchtpu"
    simulated = False

    def memory(self) -> MemoryStats:
        capacity = torch.tpu.get_device_properties().total_memory
        try:  # TorchTPU 0.2.0 has no memory API on torch.tpu; ask torch.accelerator
            stats = torch.accelerator.memory_stats()
        except RuntimeError:
            stats = {}
        if "allocated_bytes.all.current" not in stats:
            return MemoryStats(capacity, 0, 0, 0, 0, measured=False)
        return MemoryStats(
            capacity,
            stats["allocated_bytes.all.current"],
            stats.get("allocated_bytes.all.peak", 0),
            stats.get("allocation.all.allocated", 0),
            stats.get("num_ooms", 0),
        )

    def status(self) -> DeviceStatus:
        tpu = torch.tpu
        mesh = _host_topology()
        hosts = _hosts()
        return DeviceStatus(
            backend=f"TorchTPU {_version()}",
            simulated=False,
            device_name=tpu.get_device_name(),
            topology=mesh[0],
            topology_shape=mesh[1],
            chips=mesh[2] * hosts,
            devices_in_process=torch.accelerator.device_count(),
            memory=self.memory(),
            eager_mode=getattr(tpu.eager_mode, "name", str(tpu.eager_mode)),
            chip_index=0,  # torch-tpu 0.2.0 does not say which chip of the host tpu:0 is
            hosts=hosts,
        )

    def set_eager_mode(self, mode) -> None:
        """TorchTPU publishes nothing: the change is published here (a change made by
        assigning ``torch.tpu.eager_mode`` directly is seen by the dashboard, not logged)."""
        old = torch.tpu.eager_mode
        torch.tpu.eager_mode = mode
        if old != mode:
            BUS.emit("mode_change", old=old, new=mode)

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


def _hosts() -> int:
    """The hosts of the slice, from the environment libtpu reads (``TPU_HOST_BOUNDS``, else
    the workers named in ``TPU_WORKER_HOSTNAMES``); one where neither is set."""
    import os

    bounds = [
        int(x) for x in os.environ.get("TPU_HOST_BOUNDS", "").split(",") if x.strip().isdigit()
    ]
    if bounds:
        return math.prod(bounds)
    workers = [w for w in os.environ.get("TPU_WORKER_HOSTNAMES", "").split(",") if w.strip()]
    return max(1, len(workers))
