"""tpu_lab: a notebook workbench for PyTorch on TPUs, with a bundled simulated TPU device.

``import tpu_lab`` makes "tpu" a working PyTorch device: TorchTPU's on a real TPU, the bundled
simulated device (on the CPU) everywhere else; ``%load_ext tpu_lab`` adds the ``%tpu`` magics.
"""

from __future__ import annotations

import os
import sys
import warnings

from . import _drawn
from ._version import __version__
from .errors import (
    BackendConflictError,
    CharsInputError,
    DemoInputError,
    DeviceCoreError,
    DigitsInputError,
    MediaError,
    NotSimulatedError,
    ShapesModelError,
    ShardingError,
    SpmdError,
    TopologyError,
    TpuLabError,
)
from .runtime import activate as _activate
from .runtime import backend

__all__ = [
    "BackendConflictError",
    "CharsInputError",
    "DemoInputError",
    "DeviceCoreError",
    "DigitsInputError",
    "MediaError",
    "NotSimulatedError",
    "ShapesModelError",
    "ShardingError",
    "SpmdError",
    "TopologyError",
    "TpuLabError",
    "__version__",
    "backend",
    "cache_counts",
    "dashboard",
    "estimating",
    "event_log",
    "explain",
    "load_ipython_extension",
    "preview",
    "scratch",
    "status",
    "timed",
    "use_topology",
    "view",
]


def status():
    """Backend, device, topology, HBM and eager mode of the "tpu" device in this process (a
    ``DeviceStatus``; ``print(tpu_lab.view(tpu_lab.status()))`` draws it in a terminal)."""
    return backend().status()


def dashboard(**options):
    """The live dashboard widget (``%tpu dashboard``): HBM per chip, the eager-mode switch,
    the compile-cache hit rate and the event feed; needs ``pip install 'tpu-lab[lab]'``."""
    from .views.dashboard import Dashboard

    return Dashboard(**options)


def event_log(kind: str | None = None, cell: int | None = None):
    """The recorded events (optionally of one kind or from one notebook cell), as a view."""
    from .events import log
    from .views import EventLogView

    return EventLogView(log.events(kind, cell))


def __getattr__(name: str):
    if name in ("timed", "estimating", "cache_counts"):
        from . import timing

        return getattr(timing, name)
    if name == "preview":
        from .media import preview

        return preview
    if name == "view":
        from .views import view

        return view
    if name == "explain":
        from .views.events import explain

        return explain
    raise AttributeError(f"module 'tpu_lab' has no attribute '{name}'")


def _text_of(obj) -> str:
    """``str()`` of a data object (a plan, an estimate, the status...): its picture's text."""
    from .views import view

    return view(obj).to_text()


_drawn.install(_text_of)


#: The folder, under the working directory, that the teaching notebooks write to (git ignores
#: every folder of this name: running a notebook leaves the checkout as it was).
SCRATCH = "scratch"


def scratch(name: str = "") -> str:
    """``scratch/name``: where a notebook writes what it makes (a saved model, a tensor, a
    script), the folder created; ``tpu_lab.scratch("tiny-llama")``."""
    os.makedirs(SCRATCH, exist_ok=True)
    return os.path.join(SCRATCH, name) if name else SCRATCH


def use_topology(name: str) -> str:
    """Simulate ``name`` (e.g. ``"v6e-4"``, ``"v5e-8"``) on the bundled device."""
    return backend().use_topology(name)


def load_ipython_extension(ipython) -> None:
    """``%load_ext tpu_lab``: register the ``%tpu`` / ``%%tpu`` magics (``%tpu --help``), the
    display formatters of tpu_lab's data objects and the cell follower of the event log. Only
    this registers anything with IPython: neither ``import tpu_lab`` nor ``import torch`` does."""
    from .magics import register

    register(ipython)


def _start() -> None:
    """Make "tpu" a device (TorchTPU's or the bundled one) and start recording its events."""
    if _activate() is None:
        from .runtime import conflict as _conflict

        warnings.warn(_conflict(), RuntimeWarning, stacklevel=3)
        return
    from . import events
    from .runtime import torch_tpu_finder

    events.install()
    torch_tpu_finder.install()  # `import torch_tpu` where TorchTPU is absent (tpu_lab.standin)
    if "TORCHELASTIC_RUN_ID" in os.environ:  # a torchrun worker drives its rank's chip
        from .launch.torchrun import bind as _bind

        _bind()


# Imported by torch's autoload (torch is still initialising): _autoload() decides what runs.
_torch = sys.modules.get("torch")
if not getattr(getattr(_torch, "__spec__", None), "_initializing", False):
    _start()
