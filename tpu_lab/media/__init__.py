"""Images and video inline: ``preview`` for tensors (any device), arrays, PIL images, diffusers
outputs and frame sequences; H.264 encoding; denoising-trajectory capture; a progress bar.

Names load on first use, so ``import tpu_lab`` stays fast.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "to_pil": ".convert",
    "Preview": ".previews",
    "preview": ".previews",
    "encode_mp4": ".video",
    "encode_webp": ".video",
    "encode_gif": ".video",
    "SavePolicy": ".paths",
    "save_policy": ".paths",
    "set_save_policy": ".paths",
    "Trajectory": ".trajectory",
    "Progress": ".progress_bar",
    "progress": ".progress_bar",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'tpu_lab.media' has no attribute '{name}'")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
