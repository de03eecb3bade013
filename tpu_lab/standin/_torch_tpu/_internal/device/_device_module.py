"""``torch_tpu._internal.device._device_module`` (stand-in): ``torch.tpu`` as TorchTPU's class.

TorchTPU registers a class as ``torch.tpu``; its tutorials' helper (``tpu_utils.py``) reaches it
as ``_device_module.DeviceModule`` to ask whether the runtime is up and to start it
(``is_initialized()``, ``_init_runtime_options(device_type="tpu")``). Here the class forwards to
the bundled device's ``torch.tpu``: "starting the runtime" is PyTorch's lazy device init
(``torch.tpu._lazy_init``), nothing more runs on a laptop. TorchTPU 0.2.0 names the class
``TpuDeviceModule`` (base ``_DeviceModule``) and returns it from ``get_device_module("tpu")``;
``DeviceModule`` is the name the tutorials' helper uses.
"""

from __future__ import annotations

import torch

__tpu_lab_standin__ = True
__all__ = ["DeviceModule", "TpuDeviceModule", "get_device_module"]


class _DeviceModule:
    """Device-module classmethods shared by TorchTPU's device types (only "tpu" here)."""

    _device_type: str = "tpu"

    @classmethod
    def is_initialized(cls) -> bool:
        """Whether the device is initialized (``torch.tpu.is_initialized()``)."""
        return torch.tpu.is_initialized()

    @classmethod
    def _init_runtime_options(cls, device_type: str = "tpu") -> None:
        """Start the device for ``device_type``: PyTorch's lazy init of "tpu" here."""
        if device_type != cls._device_type:
            raise ValueError(
                f"device_type {device_type!r} is not supported: the bundled device is "
                f"{cls._device_type!r} (TorchTPU's xla_cpu and xla_cuda types are not simulated)."
            )
        torch.tpu._lazy_init()


class TpuDeviceModule(_DeviceModule):
    """The "tpu" device module (TorchTPU 0.2.0's name)."""


#: The name TorchTPU's tutorials' helper (``tpu_utils.py``) uses; not in torch-tpu 0.2.0.
DeviceModule = TpuDeviceModule


def get_device_module(device_type: str) -> type[_DeviceModule]:
    """The device module class of ``device_type`` (only "tpu" exists here)."""
    if device_type != "tpu":
        raise ValueError(f"Unsupported device type {device_type!r}: the bundled device is 'tpu'.")
    return TpuDeviceModule
