"""Execution settings of the device: eager mode and matmul precision, as TorchTPU has them.

Global settings are properties of ``torch.tpu`` (``torch.tpu.eager_mode = ...``); local ones
are context managers that restore the previous value in ``finally``.
"""

from __future__ import annotations

import enum
import threading
from contextlib import contextmanager


class EagerMode(enum.Enum):
    """How eager ops run. ``DEFER_NEVER`` is the default."""

    DEFER_NEVER = "DEFER_NEVER"
    DEFER_NEVER_AND_LAUNCH_BLOCKING = "DEFER_NEVER_AND_LAUNCH_BLOCKING"
    DEFER_AND_FUSE = "DEFER_AND_FUSE"


class Precision(enum.Enum):
    """Matmul precision on the MXU, as ``torch.set_float32_matmul_precision`` names it."""

    DEFAULT = "default"
    HIGH = "high"
    HIGHEST = "highest"


class _Settings:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.eager_mode = EagerMode.DEFER_NEVER
        self.precision = Precision.HIGHEST
        self.allow_excess_precision = True
        self.listeners: list = []


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
    _refuse_inside_compile("set the eager mode")
    with SETTINGS.lock:
        old, SETTINGS.eager_mode = SETTINGS.eager_mode, mode
        listeners = list(SETTINGS.listeners)
    if old is not mode:
        for listener in listeners:
            listener(old, mode)


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


def as_precision(value) -> Precision:
    if isinstance(value, Precision):
        return value
    if isinstance(value, str):
        for p in Precision:
            if value.strip().lower() in (p.value, p.name.lower()):
                return p
    names = ", ".join(f"torch.tpu.Precision.{p.name}" for p in Precision)
    raise ValueError(f"Unknown precision {value!r}; use one of {names}.")


def _refuse_inside_compile(what: str) -> None:
    import torch

    if torch.compiler.is_compiling():
        raise RuntimeError(
            f"Cannot {what} inside torch.compile: the compiled graph has one mode. "
            "Set it before calling the compiled function."
        )
