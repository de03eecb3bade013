"""PyTorch's device-backend autoload (entry point group ``torch.backends``): ``import torch``
makes "tpu" the bundled device, so it is there before any library asks for an accelerator
(Diffusers caches it when its pipelines are imported), as TorchTPU is where it is installed.

It registers the device and nothing else: no IPython magics, formatters or hooks (those come
with ``%load_ext tpu_lab``), and code that never uses "tpu" runs as without tpu_lab. It steps
aside, and a later ``import tpu_lab`` starts afresh, where

- the real torch-tpu is installed (or ``TPU_LAB_BACKEND=torchtpu``): TorchTPU's own entry
  point loads it and ``import tpu_lab`` observes it;
- PyTorch already has an accelerator (a CUDA, ROCm, XPU or MPS build, or another PrivateUse1
  backend): PyTorch ranks a registered PrivateUse1 device first, so "tpu" would become
  ``torch.accelerator``'s current accelerator and move code that never names "tpu" off that
  device. ``import tpu_lab`` registers it there, as the user then asks.

``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` turns autoload off (PyTorch calls no entry point).
"""

from __future__ import annotations

import os
import sys


def other_accelerator() -> str | None:
    """The accelerator PyTorch has without tpu_lab's device (``None`` on a CPU-only build)."""
    import torch

    accelerator = torch.accelerator.current_accelerator()
    return None if accelerator is None else accelerator.type


def load() -> None:
    package = sys.modules["tpu_lab"]
    if getattr(package.__spec__, "_initializing", False):
        return  # `import tpu_lab` imported torch: it starts the device itself, once done
    from .runtime.select import BACKEND_ENV
    from .runtime.torch_tpu_finder import real_spec

    if (
        os.environ.get(BACKEND_ENV, "").strip().lower() == "torchtpu"
        or real_spec() is not None
        or other_accelerator() is not None
    ):
        for name in [m for m in sys.modules if m == "tpu_lab" or m.startswith("tpu_lab.")]:
            del sys.modules[name]
        return
    package._start()
