"""The event log: one ordered, bounded, thread-safe record of what the device did, and why.

Every event is a frozen :class:`Event`. The log keeps the newest ``capacity`` events (older ones
are dropped and counted), numbers them in order and tags each with the IPython cell that caused
it. Events arrive two ways: :meth:`EventLog.record` (what the bus carries, recorded by
:mod:`.device_collector`), and the log's sources, read before every record and every read, which
hold what is known only after the fact (Dynamo's compilations, :mod:`.dynamo`). Each event goes
to the log's subscribers as a :class:`Snapshot`. Recording is a few dictionary and deque
operations under one lock, and one call per subscriber.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import json
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ..runtime import DeviceStatus

#: The kinds of event, in the order a user meets them.
KINDS = (
    "compile",
    "recompile",
    "cache_hit",
    "cache_miss",
    "sync",
    "transfer",
    "oom",
    "mode_change",
)
_KINDS = frozenset(KINDS)


@dataclass(frozen=True)
class Event:
    """One thing that happened on the device.

    ``where`` is the user's own ``file:line`` that caused it (never a frame inside torch or
    tpu_lab); ``cell`` the IPython execution count, when run in IPython; ``details`` holds the
    kind-specific data (shapes, reasons, bytes, seconds) as plain JSON-able values.
    """

    seq: int
    kind: str
    summary: str
    time: float
    cell: int | None = None
    where: str | None = None
    details: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), default=str)


@dataclass(frozen=True, eq=False)
class Snapshot:
    """What a subscriber of an :class:`EventLog` receives: the ``event`` just recorded, or
    ``None`` at the end of an IPython cell (and where one was made to read the device now), and
    the device's state: :attr:`status` and :attr:`cache`.

    The state is read from :func:`tpu_lab.runtime.backend` once per snapshot, when a subscriber
    first asks for it; every subscriber of the snapshot then gets the same figures. A dashboard
    asks for the newest snapshot's only, when it draws: reading the backend for every event
    would cost several times what recording the event costs.
    """

    event: Event | None = None

    @functools.cached_property
    def status(self) -> DeviceStatus:
        """Backend, topology, the process's chip and its HBM, eager mode."""
        from ..runtime import backend

        return backend().status()

    @functools.cached_property
    def cache(self) -> dict[str, int]:
        """The eager compile cache's ``requests``, ``hits`` and ``misses``."""
        from ..runtime import backend

        return backend().cache_stats()


@dataclass(frozen=True)
class Pending:
    """An event a source knew of before the log asked for it; ``time`` is when it happened."""

    kind: str
    summary: str
    where: str | None
    details: dict[str, Any]
    time: float


class Source(Protocol):
    """Where a log reads events that are known only after the fact (Dynamo's compilations)."""

    def collect(self) -> Iterable[Pending]:
        """The events that happened since the last call, oldest first."""


Subscriber = Callable[[Snapshot], None]


class EventLog:
    """A bounded, ordered, thread-safe event log with sources and subscribers."""

    def __init__(self, capacity: int = 10_000) -> None:
        if capacity < 1:
            raise ValueError(f"An event log needs room for at least 1 event, got {capacity}.")
        self._lock = threading.Lock()
        self._events: collections.deque[Event] = collections.deque(maxlen=capacity)
        self._seq = 0
        self.dropped = 0
        self.enabled = True
        self.cell: Callable[[], int | None] = lambda: None
        self._sources: tuple[Source, ...] = ()
        self._subscribers: tuple[Subscriber, ...] = ()

    @property
    def capacity(self) -> int:
        return self._events.maxlen or 0

    def add_source(self, source: Source) -> Callable[[], None]:
        """Read ``source`` before every record and every read, and at the end of every cell;
        returns a function that removes it."""
        with self._lock:
            self._sources = (*self._sources, source)

        def remove() -> None:
            with self._lock:
                self._sources = tuple(s for s in self._sources if s is not source)

        return remove

    def record(
        self, kind: str, summary: str, *, where: str | None = None, **details: Any
    ) -> Event | None:
        """Append an event (``None`` when recording is off) and send it to the subscribers."""
        if not self.enabled:
            return None
        self._collect()  # what the sources hold happened before this event
        return self._append(kind, summary, where, details, time.time())

    def _collect(self) -> None:
        """Append what the sources hold: the one place the log reads them."""
        for source in self._sources:
            for p in source.collect():
                self._append(p.kind, p.summary, p.where, p.details, p.time)

    def _append(
        self, kind: str, summary: str, where: str | None, details: dict[str, Any], at: float
    ) -> Event | None:
        if not self.enabled:
            return None
        if kind not in _KINDS:
            raise ValueError(f"Unknown event kind {kind!r}; use one of {', '.join(KINDS)}.")
        cell = self.cell()
        with self._lock:
            self._seq += 1
            event = Event(self._seq, kind, summary, at, cell, where, details)
            if len(self._events) == self._events.maxlen:
                self.dropped += 1
            self._events.append(event)
        self._deliver(event)
        return event

    def _deliver(self, event: Event | None) -> None:
        subscribers = self._subscribers
        if subscribers:
            snapshot = Snapshot(event)
            for subscriber in subscribers:
                subscriber(snapshot)

    def end_cell(self) -> None:
        """The running IPython cell ended: append what the sources hold (its compilations,
        while its number is still current), then send the subscribers a snapshot without an
        event, so that they can show the cell's end at once."""
        self._collect()
        self._deliver(None)

    def events(
        self, kind: str | Iterable[str] | None = None, cell: int | None = None
    ) -> list[Event]:
        """The kept events, oldest first, optionally of some kinds or from one cell."""
        kinds = {kind} if isinstance(kind, str) else set(kind) if kind is not None else None
        self._collect()
        with self._lock:
            snapshot = list(self._events)
        return [
            e
            for e in snapshot
            if (kinds is None or e.kind in kinds) and (cell is None or e.cell == cell)
        ]

    def last_seq(self) -> int:
        """The number of the newest event recorded so far (0 before the first); with
        :meth:`since`, what a block of code caused."""
        self._collect()
        with self._lock:
            return self._seq

    def since(self, seq: int, kind: str | Iterable[str] | None = None) -> list[Event]:
        """The kept events numbered after ``seq`` (a :meth:`last_seq`), optionally of some kinds."""
        return [e for e in self.events(kind) if e.seq > seq]

    def subscribe(self, subscriber: Subscriber) -> Callable[[], None]:
        """Call ``subscriber(snapshot)`` for every event this log records, in order, and at the
        end of every IPython cell (``snapshot.event`` is then ``None``); returns a function that
        unsubscribes (it may be called more than once). A subscriber must not raise."""
        with self._lock:
            self._subscribers = (*self._subscribers, subscriber)

        def unsubscribe() -> None:
            with self._lock:
                self._subscribers = tuple(s for s in self._subscribers if s is not subscriber)

        return unsubscribe

    def clear(self) -> None:
        with self._lock:
            self._events.clear()
            self.dropped = 0

    def write_jsonl(self, file: IO[str]) -> int:
        """Write the kept events as JSON lines; returns how many."""
        events = self.events()
        for event in events:
            file.write(event.to_json() + "\n")
        return len(events)

    def __len__(self) -> int:
        return len(self._events)
