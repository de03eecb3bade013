"""tpu_lab: a notebook workbench for PyTorch on TPUs, with a bundled simulated TPU device.

``import tpu_lab`` makes "tpu" a working PyTorch device: TorchTPU's on a real TPU, the bundled
simulated device (on the CPU) everywhere else.
"""

from __future__ import annotations

import warnings

from .errors import BackendConflictError, NotSimulatedError, TopologyError, TpuLabError
from .runtime import activate as _activate
from .runtime import backend

__version__ = "0.1.0"
__all__ = [
    "BackendConflictError",
    "NotSimulatedError",
    "TopologyError",
    "TpuLabError",
    "__version__",
    "backend",
    "status",
    "use_topology",
]


def status():
    """Backend, device, topology, HBM and eager mode of the "tpu" device in this process."""
    return backend().status()


def use_topology(name: str) -> str:
    """Simulate ``name`` (e.g. ``"v6e-4"``, ``"v5e-8"``) on the bundled device."""
    return backend().use_topology(name)


if _activate() is None:
    from .runtime import conflict as _conflict

    warnings.warn(_conflict(), RuntimeWarning, stacklevel=2)
else:
    from . import events

    events.install()
