"""The backend-neutral runtime: one answer to "which backend, devices, topology, HBM".

Two adapters implement :class:`~tpu_lab.runtime.base.Backend`: TorchTPU on a real TPU and the
bundled simulated device everywhere else. :func:`activate` picks one (see
:mod:`tpu_lab.runtime.select`); everything else in tpu_lab talks to the backend it returns.
"""

from __future__ import annotations

from .base import Backend, DeviceStatus
from .select import BACKEND_ENV, activate, backend, conflict

__all__ = ["BACKEND_ENV", "Backend", "DeviceStatus", "activate", "backend", "conflict"]
