"""``torch.Generator(device="tpu")``: a random generator for the bundled device.

PyTorch creates PrivateUse1 generators through C++ hooks that a Python backend cannot provide,
so ``torch.Generator`` is replaced by a subclass that builds a CPU generator (the bundled device
draws its random numbers on the CPU, which is what makes them equal to the CPU's for the same
seed) and reports ``device == tpu:0``. Its metaclass keeps ``isinstance(g, torch.Generator)``
true for every generator, including ones PyTorch creates itself.
"""

from __future__ import annotations

import torch

_CGenerator = torch._C.Generator
_TPU = None


class _GeneratorMeta(type(_CGenerator)):
    def __instancecheck__(cls, obj) -> bool:
        return isinstance(obj, _CGenerator)

    def __subclasscheck__(cls, sub) -> bool:
        return issubclass(sub, _CGenerator)


class Generator(_CGenerator, metaclass=_GeneratorMeta):
    """``torch.Generator`` that also accepts ``device="tpu"``."""

    def __new__(cls, device="cpu"):
        global _TPU
        dev = torch.device(device) if not isinstance(device, torch.device) else device
        if dev.type != "tpu":
            return _CGenerator(dev)
        from .tpu_module import _index

        _index(dev)
        generator = super().__new__(cls, "cpu")
        if _TPU is None:
            _TPU = torch.device("tpu", 0)
        generator._tpu_device = _TPU
        return generator

    @property
    def device(self) -> torch.device:
        return self._tpu_device

    def __reduce__(self):
        return (_restore, (self.get_state(),))


def _restore(state: torch.Tensor) -> Generator:
    g = Generator("tpu")
    g.set_state(state)
    return g


def install() -> None:
    if torch.Generator is not Generator:
        torch.Generator = Generator
