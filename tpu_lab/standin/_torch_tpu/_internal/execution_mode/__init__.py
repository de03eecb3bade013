"""``torch_tpu._internal.execution_mode`` (stand-in): the eager mode as a module property.

``execution_mode.eager_mode = execution_mode.EagerMode.DEFER_AND_FUSE`` and
``with execution_mode.set_eager_mode(...)`` act on the same setting as ``torch.tpu.eager_mode``
(TorchTPU 0.2.0). Code written for earlier TorchTPU releases also runs: ``get_eager_mode()``,
and ``set_eager_mode(mode)`` called as a plain function sets the mode (in a ``with`` block it
is restored at the end, as in 0.2.0).
"""

import sys
import types

from tpu_lab.device import current, modes

__tpu_lab_standin__ = True
EagerMode = modes.EagerMode
__all__ = ["EagerMode", "disable_inplace_buffer_donation", "set_eager_mode"]


def get_eager_mode():
    """The current eager mode (TorchTPU releases before 0.2.0)."""
    return current().eager_mode


class set_eager_mode:  # noqa: N801 - TorchTPU's name; a function in its API
    """Set ``mode`` now; used as a context manager, the previous mode comes back at its end."""

    def __init__(self, mode) -> None:
        self.mode = modes.as_eager_mode(mode)
        self.previous = current().eager_mode
        current().put_eager_mode(self.mode)

    def __enter__(self):
        return self.mode

    def __exit__(self, *exc) -> bool:
        current().put_eager_mode(self.previous)
        return False

_flags = {"enable_cpu_fallback": True, "inplace_buffer_donation": True}


class _ExecutionModeModule(types.ModuleType):
    @property
    def eager_mode(self):
        return current().eager_mode

    @eager_mode.setter
    def eager_mode(self, value) -> None:
        current().put_eager_mode(value)

    @property
    def enable_cpu_fallback(self) -> bool:
        """Accepted and kept; every op of the bundled device runs on the CPU anyway."""
        return _flags["enable_cpu_fallback"]

    @enable_cpu_fallback.setter
    def enable_cpu_fallback(self, value: bool) -> None:
        _flags["enable_cpu_fallback"] = bool(value)

    @property
    def disable_inplace_buffer_donation(self) -> bool:
        return not _flags["inplace_buffer_donation"]

    @disable_inplace_buffer_donation.setter
    def disable_inplace_buffer_donation(self, value: bool) -> None:
        _flags["inplace_buffer_donation"] = not value


sys.modules[__name__].__class__ = _ExecutionModeModule
