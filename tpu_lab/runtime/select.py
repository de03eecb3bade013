"""Choosing the backend: TorchTPU on a real TPU, the bundled device everywhere else.

``TPU_LAB_BACKEND`` (read once, at :func:`activate`) overrides the choice: ``auto``
(default), ``bundled`` or ``torchtpu``.
"""

from __future__ import annotations

import glob
import os
import sys
import threading

from .. import _install
from ..errors import BackendConflictError, DeviceCoreError
from .base import Backend
from .torch_tpu_finder import is_standin, real_spec

#: Environment variable: which device "tpu" is: ``auto`` (default: TorchTPU where it is
#: installed and a TPU is present, else the bundled device), ``bundled`` or ``torchtpu``.
BACKEND_ENV = "TPU_LAB_BACKEND"
_CHOICES = ("auto", "bundled", "torchtpu")

_lock = threading.Lock()
_active: Backend | None = None
_conflict: str | None = None

CONFLICT_MESSAGE = (
    "torch_tpu is loaded in this process (PyTorch imports it automatically when it is "
    "installed), but this machine has no TPU, and tpu_lab's simulated 'tpu' device cannot "
    "share a process with torch_tpu. Fix: start Python with TORCH_DEVICE_BACKEND_AUTOLOAD=0 "
    "(for example `TORCH_DEVICE_BACKEND_AUTOLOAD=0 jupyter lab`), or pick the Jupyter kernel "
    '"Python (tpu_lab simulated TPU)" that `tpu-lab kernel install` sets up, or uninstall '
    "torch-tpu on machines without a TPU."
)


def tpu_hardware_present() -> bool:
    """True when the host exposes TPU chips (``/dev/accel*`` or ``/dev/vfio/N``)."""
    return bool(glob.glob("/dev/accel[0-9]*") or glob.glob("/dev/vfio/[0-9]*"))


def torch_tpu_state() -> str:
    """``'loaded'``, ``'installed'`` (not imported) or ``'absent'``, for the real TorchTPU
    (tpu_lab's stand-in, :mod:`tpu_lab.runtime.torch_tpu_finder`, counts as absent)."""
    module = sys.modules.get("torch_tpu")
    if module is not None and not is_standin(module):
        return "loaded"
    return "installed" if real_spec() is not None else "absent"


def _choice() -> str:
    value = os.environ.get(BACKEND_ENV, "auto").strip().lower() or "auto"
    if value not in _CHOICES:
        raise BackendConflictError(
            f"{BACKEND_ENV}={value!r} is not valid; use one of {', '.join(_CHOICES)}."
        )
    return value


def _torchtpu_has_chip() -> bool:
    import torch

    accelerator = torch.accelerator.current_accelerator()
    return (
        accelerator is not None and accelerator.type == "tpu" and torch.accelerator.is_available()
    )


def _pick() -> Backend:
    import torch  # noqa: F401  (device-backend autoload may import torch_tpu)

    choice = _choice()
    state = torch_tpu_state()
    if choice == "torchtpu" or (
        choice == "auto" and state == "installed" and tpu_hardware_present()
    ):
        if state == "absent":
            raise BackendConflictError(
                f"{BACKEND_ENV}=torchtpu but torch-tpu is not installed. On a TPU VM: "
                f"{_install.hint('tpu')}. Elsewhere use the bundled device "
                f"({BACKEND_ENV}=auto)."
            )
        import torch_tpu  # noqa: F401

        from .torchtpu import TorchTPUBackend

        return TorchTPUBackend()
    if state == "loaded":
        if choice == "auto" and _torchtpu_has_chip():
            from .torchtpu import TorchTPUBackend

            return TorchTPUBackend()
        raise BackendConflictError(CONFLICT_MESSAGE)
    from .bundled import BundledBackend

    return BundledBackend()


def activate() -> Backend | None:
    """Pick and start the backend once; ``None`` (and :func:`conflict` says why) if none can run."""
    global _active, _conflict
    with _lock:
        if _active is None and _conflict is None:
            try:
                _active = _pick()
            except (BackendConflictError, DeviceCoreError) as exc:
                _conflict = str(exc)
        return _active


def conflict() -> str | None:
    """Why no backend could start (torch_tpu loaded without a TPU, or the bundled device's core
    could not be built), or ``None``."""
    activate()
    return _conflict


def backend() -> Backend:
    """The active backend; raises :class:`BackendConflictError` with the fix if there is none."""
    active = activate()
    if active is None:
        raise BackendConflictError(_conflict)
    return active
