"""The event log of tpu_lab: compilations, recompilations (explained), sync points, transfers,
out-of-memory errors and mode changes, each with the user's ``file:line`` and IPython cell.

Events flow one way: publishers (the bundled device, the eager modes, the TorchTPU adapter, the
IPython cell follower) emit on the bus (:mod:`.bus`); its one subscriber records them into
``tpu_lab.events.log`` (:mod:`.device_collector`), which also reads what Dynamo compiled
(:mod:`.dynamo`); the log sends each event, with the device's state, to its own subscribers (the
dashboard, progress bars) as a :class:`Snapshot`.

``tpu_lab.events.log`` and its collectors are made on first use. Recording starts with
:func:`install` (``import tpu_lab`` calls it); ``TPU_LAB_EVENTS=0`` keeps it off.
"""

from __future__ import annotations

import os
import threading

from ..bus import BUS
from .context import ipython_cell
from .device_collector import DeviceCollector
from .dynamo import DynamoCollector
from .event_log import KINDS, Event, EventLog, Snapshot
from .explain import Explanation, explain_guard

__all__ = [
    "KINDS",
    "Event",
    "EventLog",
    "Explanation",
    "Snapshot",
    "explain_guard",
    "install",
    "log",
    "reset",
]

#: Environment variable: ``0`` records no events (read once, at install); default ``1``.
EVENTS_ENV = "TPU_LAB_EVENTS"


class _Recording:
    """The process's event log and the collectors that write into it."""

    def __init__(self) -> None:
        self.log = EventLog()
        self.log.cell = ipython_cell
        self.dynamo = DynamoCollector()
        self.log.add_source(self.dynamo)
        self.device = DeviceCollector(self.log, self.dynamo)


_made: _Recording | None = None
_making = threading.Lock()


def _recording() -> _Recording:
    global _made
    if _made is None:
        with _making:
            if _made is None:
                _made = _Recording()
    return _made


def __getattr__(name: str):
    if name == "log":  # made on first use
        return _recording().log
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def reset() -> tuple[int, int]:
    """Clear the log and what the collectors remember (recompile counts, compile cost per call
    site, cache misses per sync point). Returns the events cleared and those dropped before."""
    recording = _recording()
    kept = len(recording.log.events())  # reading first collects compilations Dynamo still holds
    dropped = recording.log.dropped
    recording.log.clear()
    recording.dynamo.reset()
    recording.device.reset()
    return kept, dropped


def _on_bus(kind: str, data: dict) -> None:
    _recording().device.on_bus(kind, data)


def install() -> None:
    """Start recording (idempotent)."""
    if os.environ.get(EVENTS_ENV, "1") == "0" or _on_bus in BUS.subscribers:
        return
    BUS.subscribe(_on_bus)
