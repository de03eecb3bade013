"""``torch.backends.tpu``: the TPU's global compiler setting, where TorchTPU's tutorials set it.

TorchTPU's precision tutorial (and its test of the setting, in its repository) writes
``torch.backends.tpu.allow_excess_precision = False``; torch-tpu 0.2.0 has the same property on
``torch.tpu`` instead. Both spellings act on one setting, the device's
(:attr:`tpu_lab.device.process.Device.allow_excess_precision`): False unless ``XLA_FLAGS``
says ``--xla_allow_excess_precision``, as in 0.2.0; a change makes later graphs compile anew.
"""

from __future__ import annotations

import sys
import types

import torch

NAME = "torch.backends.tpu"


class _BackendsTpu(types.ModuleType):
    _device = None

    @property
    def allow_excess_precision(self) -> bool:
        """Whether XLA may keep more precision than asked (``torch.tpu.allow_excess_precision``)."""
        return self._device.allow_excess_precision

    @allow_excess_precision.setter
    def allow_excess_precision(self, value: bool) -> None:
        self._device.allow_excess_precision = value

    def __dir__(self) -> list[str]:
        return sorted({*super().__dir__(), "allow_excess_precision"})


def register(device) -> None:
    """Make ``torch.backends.tpu`` (and ``import torch.backends.tpu``) this module, on
    ``device``'s setting."""
    module = _BackendsTpu(NAME, __doc__)
    module._device = device
    sys.modules[NAME] = module
    torch.backends.tpu = module
