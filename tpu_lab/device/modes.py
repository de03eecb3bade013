"""Execution settings of the device: eager mode and matmul precision, as TorchTPU has them.

Global settings are properties of ``torch.tpu`` (``torch.tpu.eager_mode = ...``); local ones
are context managers that restore the previous value in ``finally``.
"""

from __future__ import annotations

import enum
import threading
from contextlib import contextmanager

from . import hooks


class EagerMode(enum.Enum):
    """How eager ops run (TorchTPU's values). ``DEFER_NEVER`` is the default."""

    DEFER_AND_FUSE = 0
    DEFER_NEVER = 1
    DEFER_NEVER_AND_LAUNCH_BLOCKING = 2
    _INTERNAL_COMPILE_FX_GRAPH = 4


class Precision(enum.IntEnum):
    """Matmul precision (TorchTPU's values); the bundled device computes in full float32."""

    DEFAULT = 0
    HIGH = 1
    HIGHEST = 2


class _Settings:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.eager_mode = EagerMode.DEFER_NEVER
        self.precision: list[Precision] = [Precision.DEFAULT]
        self.allow_excess_precision = False


SETTINGS = _Settings()


def as_eager_mode(mode) -> EagerMode:
    """Accept an ``EagerMode`` or its name (any case); anything else is a clear error."""
    if isinstance(mode, EagerMode):
        return mode
    if isinstance(mode, str) and mode.strip().upper() in EagerMode.__members__:
        return EagerMode[mode.strip().upper()]
    names = ", ".join(f"torch.tpu.EagerMode.{m}" for m in EagerMode.__members__)
    raise ValueError(f"Unknown eager mode {mode!r}; use one of {names}.")


def get_eager_mode() -> EagerMode:
    return SETTINGS.eager_mode


def put_eager_mode(mode) -> None:
    mode = as_eager_mode(mode)
    _refuse_inside_compile()
    with SETTINGS.lock:
        old, SETTINGS.eager_mode = SETTINGS.eager_mode, mode
    _switch_recording(mode)
    if old is not mode:
        hooks.emit("mode_change", old=old, new=mode)


@contextmanager
def set_eager_mode(mode):
    """Run the block in ``mode``; the previous mode comes back on exit, also on exceptions."""
    mode = as_eager_mode(mode)
    previous = get_eager_mode()
    put_eager_mode(mode)
    try:
        yield mode
    finally:
        put_eager_mode(previous)


@contextmanager
def precision(mode: Precision):
    """Matmul precision inside the block (TorchTPU: a context manager, not a setting)."""
    if not isinstance(mode, Precision):
        raise ValueError(
            "expected to be one of 'PrecisionConfig.DEFAULT', 'PrecisionConfig.HIGH', or "
            f"'PrecisionConfig.HIGHEST', got '{mode}'"
        )
    SETTINGS.precision.append(mode)
    try:
        yield
    finally:
        SETTINGS.precision.pop()


def _refuse_inside_compile() -> None:
    import torch

    if torch.compiler.is_compiling():
        raise RuntimeError("A compiled graph cannot select how to dispatch eager ops.")


def _switch_recording(mode: EagerMode) -> None:
    """DEFER_AND_FUSE records ops for the compile cache; leaving it ends the pending graph."""
    from . import bridge, fuse

    if mode is EagerMode.DEFER_AND_FUSE:
        bridge.set_recorder(fuse.CACHE.record)
    elif bridge.recorder is not None:
        fuse.CACHE.flush("eager mode change")
        bridge.set_recorder(None)
