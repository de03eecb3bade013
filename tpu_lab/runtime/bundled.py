"""The runtime adapter for tpu_lab's bundled simulated device."""

from __future__ import annotations

import os

from .. import device
from ..device.modes import NUMERICS_ENV
from ..errors import TopologyError
from ..hardware.topology import parse_topology
from ..units import MemoryStats, format_bytes
from .base import Backend, DeviceStatus


class BundledBackend(Backend):
    name = "bundled"
    simulated = True

    def __init__(self) -> None:
        self._device = device.current()
        if os.environ.get(NUMERICS_ENV, "").strip():
            from ..device import emulation  # imported only where the environment asks for it

            emulation.emulate(emulation.requested_at_start())

    def memory(self) -> MemoryStats:
        return self._device.chip.stats()

    def status(self) -> DeviceStatus:
        chip = self._device.chip
        topo = chip.topology
        return DeviceStatus(
            backend="tpu_lab bundled device",
            simulated=True,
            device_name=chip.name,
            topology=topo.name,
            topology_shape=topo.shape,
            chips=topo.devices,
            devices_in_process=1,
            memory=chip.stats(),
            eager_mode=self._device.eager_mode.name,
            chip_index=chip.index,
            hosts=topo.hosts,
        )

    def recording(self, on=None, title: str = "block"):
        """The compiled core's op log for this thread (outside such a block an op pays one
        check); see :mod:`tpu_lab.estimate.recorded`."""
        from ..estimate.recorded import estimating

        return estimating(self._device, on, title)

    def set_eager_mode(self, mode) -> None:
        self._device.put_eager_mode(mode)  # the device publishes the change

    def use_topology(self, name: str) -> str:
        topo = parse_topology(name)
        live = self._device.chip.stats().live
        if live > topo.hbm_per_device:
            raise TopologyError(
                f"Cannot switch to {topo.name}: {format_bytes(live)} of tensors are on the "
                f"device, more than its {format_bytes(topo.hbm_per_device)} of HBM per chip. "
                "Free tensors (del them) first."
            )
        self._device.use_topology(topo)
        return str(topo)
