"""Execution settings of the device: eager mode and matmul precision, as TorchTPU has them.

Global settings are properties of ``torch.tpu`` (``torch.tpu.eager_mode = ...``,
``torch.tpu.allow_excess_precision``) or, for the float32 matmul precision, PyTorch's own
``torch.set_float32_matmul_precision`` (which TorchTPU takes over, :func:`install`); local ones
are context managers that restore the previous value in ``finally``.
"""

from __future__ import annotations

import enum
import functools
import os
import threading
from contextlib import contextmanager

from . import hooks


class EagerMode(enum.Enum):
    """How eager ops run (TorchTPU's values). ``DEFER_NEVER`` is the default."""

    DEFER_AND_FUSE = 0
    DEFER_NEVER = 1
    DEFER_NEVER_AND_LAUNCH_BLOCKING = 2
    _INTERNAL_COMPILE_FX_GRAPH = 4

    def __call__(self, *args, **kwargs):
        """TorchTPU 0.2.0 refuses this too (``torch.tpu.eager_mode`` is a value, not a context
        manager, although some of its tutorials write ``with em.eager_mode(mode):``): the same
        TypeError, and the spelling that works."""
        mode = args[0] if args and isinstance(args[0], EagerMode) else self
        raise TypeError(
            "'EagerMode' object is not callable. torch.tpu.eager_mode (and torch_tpu's "
            "execution_mode.eager_mode) is the current mode, not a context manager, in TorchTPU "
            f"0.2.0 as here: write `with torch.tpu.set_eager_mode(torch.tpu.EagerMode."
            f"{mode.name}):` for a block (execution_mode.set_eager_mode in torch_tpu), or "
            f"`torch.tpu.eager_mode = torch.tpu.EagerMode.{mode.name}` to switch for good."
        )


class Precision(enum.IntEnum):
    """Float32 matmul precision on the MXU (TorchTPU's values: StableHLO's precision config)."""

    DEFAULT = 0
    HIGH = 1
    HIGHEST = 2


class _Settings:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.eager_mode = EagerMode.DEFER_NEVER
        # precision[0] is the global one (torch.set_float32_matmul_precision); blocks push
        self.precision: list[Precision] = [Precision.DEFAULT]
        # None until first read: then XLA_FLAGS decides, as in TorchTPU
        self.allow_excess_precision: bool | None = None


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
    for listener in EAGER_MODE_LISTENERS:
        listener(mode)
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
    """Float32 matmul precision inside the block (TorchTPU: a context manager over the global
    precision of ``torch.set_float32_matmul_precision``). Numbers change only while the TPU
    numerics emulation is on (``tpu_lab.numerics.emulate``)."""
    if not isinstance(mode, Precision):
        raise ValueError(
            "expected to be one of 'PrecisionConfig.DEFAULT', 'PrecisionConfig.HIGH', or "
            f"'PrecisionConfig.HIGHEST', got '{mode}'"
        )
    SETTINGS.precision.append(mode)
    _precision_changed()
    try:
        yield
    finally:
        SETTINGS.precision.pop()
        _precision_changed()


#: Called with no arguments after the precision or excess precision changes, and with the new
#: mode after the eager mode is put: ``bridge`` registers the core's side of both (it imports
#: this module; this one imports no other device module but ``hooks``).
PRECISION_LISTENERS: list = []
EAGER_MODE_LISTENERS: list = []


def _precision_changed() -> None:
    """Precision and excess precision are part of every compiled op's key: tell the core."""
    for listener in PRECISION_LISTENERS:
        listener()


#: Environment variable: ``tpu`` turns the TPU numerics emulation on at start (read once);
#: default ``cpu`` (``tpu_lab.numerics.emulate`` switches at run time).
NUMERICS_ENV = "TPU_LAB_NUMERICS"

#: TorchTPU's names for the global precision (``torch.set_float32_matmul_precision``).
_MATMUL_PRECISION = {
    "medium": Precision.DEFAULT,
    "high": Precision.HIGH,
    "highest": Precision.HIGHEST,
}


def install() -> None:
    """Let ``torch.set_float32_matmul_precision`` also set the TPU's global float32 matmul
    precision, as TorchTPU's loader does ("medium" = ``DEFAULT``, TorchTPU's default; "high" =
    ``HIGH``; "highest" = ``HIGHEST``), after it has set PyTorch's own as always (a CUDA user
    keeps TF32, the CPU keeps its setting). ``torch.get_float32_matmul_precision`` stays
    PyTorch's: the TPU's is ``torch.tpu``'s to report. Where TorchTPU itself is loaded it takes
    both functions over; this device only adds to the setter."""
    import torch

    original = torch.set_float32_matmul_precision
    if getattr(original, "_tpu_lab", False):
        return

    @functools.wraps(original)
    def set_float32_matmul_precision(precision: str) -> None:
        original(precision)  # PyTorch's own setting first (an unknown name: its warning)
        if precision in _MATMUL_PRECISION:
            SETTINGS.precision[0] = _MATMUL_PRECISION[precision]
            _precision_changed()

    set_float32_matmul_precision._tpu_lab = True
    torch.set_float32_matmul_precision = set_float32_matmul_precision


def current_precision() -> Precision:
    """The innermost ``torch.tpu.precision(...)`` block's precision, else the global one."""
    return SETTINGS.precision[-1]


#: XLA's flag, read from ``XLA_FLAGS`` as TorchTPU reads it (once, on first use).
EXCESS_PRECISION_FLAG = "--xla_allow_excess_precision"


def allow_excess_precision() -> bool:
    """``torch.tpu.allow_excess_precision``: as set, else ``XLA_FLAGS``' value, else False."""
    if SETTINGS.allow_excess_precision is None:
        SETTINGS.allow_excess_precision = _excess_precision_from_flags()
    return SETTINGS.allow_excess_precision


def set_allow_excess_precision(value: bool) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"allow_excess_precision must be True or False, got {value!r}.")
    SETTINGS.allow_excess_precision = value
    _precision_changed()


def _excess_precision_from_flags() -> bool:
    value = False
    for flag in os.environ.get("XLA_FLAGS", "").split():
        name, equals, setting = flag.partition("=")
        if name != EXCESS_PRECISION_FLAG:
            continue
        if not equals or setting in ("true", "True", "1"):
            value = True
        elif setting in ("false", "False", "0"):
            value = False
        else:
            raise ValueError(
                f"XLA_FLAGS has {flag!r}: {EXCESS_PRECISION_FLAG} takes true or false "
                f"(e.g. XLA_FLAGS={EXCESS_PRECISION_FLAG}=false)."
            )
    return value


def _refuse_inside_compile() -> None:
    import torch

    if torch.compiler.is_compiling():
        raise RuntimeError("A compiled graph cannot select how to dispatch eager ops.")
