"""Execution settings of the device, as TorchTPU names them: the eager mode and the float32
matmul precision, their scopes, and how they are read from the environment.

The process-wide values belong to the device object (:class:`tpu_lab.device.process.Device`):
``torch.tpu.eager_mode = ...``, ``torch.tpu.allow_excess_precision``, and the precision that
``torch.set_float32_matmul_precision`` also sets (:func:`install`). Blocks
(``torch.tpu.set_eager_mode(...)``, ``torch.tpu.precision(...)``) are context variables: a block
changes its own thread or asyncio task only, and restores the previous value in ``finally``.
"""

from __future__ import annotations

import contextvars
import enum
import functools
import os


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


#: The innermost ``torch.tpu.set_eager_mode`` block of this context (None: the process's mode).
EAGER_SCOPE: contextvars.ContextVar[EagerMode | None] = contextvars.ContextVar(
    "tpu_eager_mode", default=None
)
#: The innermost ``torch.tpu.precision`` block of this context (None: the process's precision).
PRECISION_SCOPE: contextvars.ContextVar[Precision | None] = contextvars.ContextVar(
    "tpu_precision", default=None
)


def as_eager_mode(mode) -> EagerMode:
    """Accept an ``EagerMode`` or its name (any case); anything else is a clear error."""
    if isinstance(mode, EagerMode):
        return mode
    if isinstance(mode, str) and mode.strip().upper() in EagerMode.__members__:
        return EagerMode[mode.strip().upper()]
    names = ", ".join(f"torch.tpu.EagerMode.{m}" for m in EagerMode.__members__)
    raise ValueError(f"Unknown eager mode {mode!r}; use one of {names}.")


def as_precision(mode) -> Precision:
    """A ``torch.tpu.Precision``, or TorchTPU's error for anything else."""
    if not isinstance(mode, Precision):
        raise ValueError(
            "expected to be one of 'PrecisionConfig.DEFAULT', 'PrecisionConfig.HIGH', or "
            f"'PrecisionConfig.HIGHEST', got '{mode}'"
        )
    return mode


def refuse_inside_compile() -> None:
    import torch

    if torch.compiler.is_compiling():
        raise RuntimeError("A compiled graph cannot select how to dispatch eager ops.")


#: Environment variable: ``tpu`` turns the TPU numerics emulation on at start (read once):
#: "tpu" float32 matmuls and convolutions as the MXU computes them at ``torch.tpu.precision``;
#: default ``cpu`` (``tpu_lab.numerics.emulate`` switches at run time).
NUMERICS_ENV = "TPU_LAB_NUMERICS"

#: TorchTPU's names for the global precision (``torch.set_float32_matmul_precision``).
MATMUL_PRECISION = {
    "medium": Precision.DEFAULT,
    "high": Precision.HIGH,
    "highest": Precision.HIGHEST,
}


def install(set_global_precision) -> None:
    """Let ``torch.set_float32_matmul_precision`` also set the TPU's global float32 matmul
    precision (``set_global_precision``), as TorchTPU's loader does ("medium" = ``DEFAULT``,
    TorchTPU's default; "high" = ``HIGH``; "highest" = ``HIGHEST``), after it has set PyTorch's
    own as always (a CUDA user keeps TF32, the CPU keeps its setting).
    ``torch.get_float32_matmul_precision`` stays PyTorch's: the TPU's is ``torch.tpu``'s to
    report. Where TorchTPU itself is loaded it takes both functions over; this device only adds
    to the setter."""
    import torch

    original = torch.set_float32_matmul_precision
    if getattr(original, "_tpu_lab", False):
        return

    @functools.wraps(original)
    def set_float32_matmul_precision(precision: str) -> None:
        original(precision)  # PyTorch's own setting first (an unknown name: its warning)
        if precision in MATMUL_PRECISION:
            set_global_precision(MATMUL_PRECISION[precision])

    set_float32_matmul_precision._tpu_lab = True
    torch.set_float32_matmul_precision = set_float32_matmul_precision


#: XLA's flag, read from ``XLA_FLAGS`` as TorchTPU reads it (once, on first use).
EXCESS_PRECISION_FLAG = "--xla_allow_excess_precision"


def excess_precision_from_flags() -> bool:
    """``XLA_FLAGS``' value of ``--xla_allow_excess_precision`` (False when absent)."""
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
