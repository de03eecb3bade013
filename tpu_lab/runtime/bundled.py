"""The runtime adapter for tpu_lab's bundled simulated device."""

from __future__ import annotations

import torch

from .. import device
from ..errors import TopologyError
from .base import Backend, DeviceStatus


class BundledBackend(Backend):
    name = "bundled"
    simulated = True

    def __init__(self) -> None:
        device.install()

    def memory(self) -> device.MemoryStats:
        return device.chip().stats()

    def status(self) -> DeviceStatus:
        chip = device.chip()
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
            eager_mode=torch.tpu.eager_mode.name,
            chip_index=chip.index,
        )

    def set_eager_mode(self, mode) -> None:
        torch.tpu.eager_mode = mode  # the device's modes publish the change

    def use_topology(self, name: str) -> str:
        topo = device.parse_topology(name)
        live = device.chip().stats().live
        if live > topo.hbm_per_device:
            raise TopologyError(
                f"Cannot switch to {topo.name}: {device.format_bytes(live)} of tensors are on "
                f"the device, more than its {device.format_bytes(topo.hbm_per_device)} of HBM "
                "per chip. Free tensors (del them) first."
            )
        device.set_topology(topo)
        return str(topo)
