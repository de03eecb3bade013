"""``torch_tpu.api`` (stand-in): ``tpu_device()`` as TorchTPU's tutorials call it."""

import functools

import torch

__tpu_lab_standin__ = True
__all__ = ["tpu_device"]


@functools.lru_cache(maxsize=1)
def tpu_device() -> torch.device:
    """The ``"tpu"`` device, ready to use (the bundled device is set up on import)."""
    return torch.device("tpu")
