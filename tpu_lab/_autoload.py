"""PyTorch's device-backend autoload (entry point group ``torch.backends``): ``import torch``
makes "tpu" the bundled device, so it is there before any library asks for an accelerator
(Diffusers caches it when its pipelines are imported), as TorchTPU is where it is installed.

Where the real torch-tpu is installed (or ``TPU_LAB_BACKEND=torchtpu``), TorchTPU's own entry
point loads it: tpu_lab steps aside, and a later ``import tpu_lab`` starts afresh and observes
it. ``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` turns autoload off (PyTorch calls no entry point).
"""

from __future__ import annotations

import os
import sys


def load() -> None:
    package = sys.modules["tpu_lab"]
    if getattr(package.__spec__, "_initializing", False):
        return  # `import tpu_lab` imported torch: it starts the device itself, once done
    from .runtime.select import BACKEND_ENV
    from .standin import real_spec

    if os.environ.get(BACKEND_ENV, "").strip().lower() == "torchtpu" or real_spec() is not None:
        for name in [m for m in sys.modules if m == "tpu_lab" or m.startswith("tpu_lab.")]:
            del sys.modules[name]
        return
    package._start()
