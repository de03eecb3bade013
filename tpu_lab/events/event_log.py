"""The event log: one ordered, bounded, thread-safe record of what the device did, and why.

Every event is a frozen :class:`Event`. The log keeps the newest ``capacity`` events (older ones
are dropped and counted), numbers them in order, tags each with the IPython cell that caused it,
and publishes each one on the event bus (kind ``recorded``; :meth:`EventLog.subscribe` delivers
those of one log). Recording is a few dictionary and deque operations under one lock.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import IO, Any

from .bus import BUS

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


Subscriber = Callable[[Event], None]


class EventLog:
    """A bounded, ordered, thread-safe event log with subscribers."""

    def __init__(self, capacity: int = 10_000) -> None:
        if capacity < 1:
            raise ValueError(f"An event log needs room for at least 1 event, got {capacity}.")
        self._lock = threading.Lock()
        self._events: collections.deque[Event] = collections.deque(maxlen=capacity)
        self._seq = 0
        self.dropped = 0
        self.enabled = True
        self.cell: Callable[[], int | None] = lambda: None
        #: Called before every read, to collect events recorded lazily (Dynamo's metrics).
        self.pull: Callable[[], None] = lambda: None

    @property
    def capacity(self) -> int:
        return self._events.maxlen or 0

    def record(
        self, kind: str, summary: str, *, where: str | None = None, **details: Any
    ) -> Event | None:
        """Append an event (``None`` when recording is off) and publish it on the bus."""
        if not self.enabled:
            return None
        if kind not in KINDS:
            raise ValueError(f"Unknown event kind {kind!r}; use one of {', '.join(KINDS)}.")
        self.pull()  # lazily recorded events (compilations) happened before this one
        cell = self.cell()
        with self._lock:
            self._seq += 1
            event = Event(self._seq, kind, summary, time.time(), cell, where, details)
            if len(self._events) == self._events.maxlen:
                self.dropped += 1
            self._events.append(event)
        BUS.emit("recorded", event=event, log=self)
        return event

    def events(
        self, kind: str | Iterable[str] | None = None, cell: int | None = None
    ) -> list[Event]:
        """The kept events, oldest first, optionally of some kinds or from one cell."""
        kinds = {kind} if isinstance(kind, str) else set(kind) if kind is not None else None
        self.pull()
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
        self.pull()
        with self._lock:
            return self._seq

    def since(self, seq: int, kind: str | Iterable[str] | None = None) -> list[Event]:
        """The kept events numbered after ``seq`` (a :meth:`last_seq`), optionally of some kinds."""
        return [e for e in self.events(kind) if e.seq > seq]

    def subscribe(self, subscriber: Subscriber) -> Callable[[], None]:
        """Call ``subscriber(event)`` for every event this log records (through the event bus);
        returns a function that unsubscribes."""

        def deliver(kind: str, data: dict[str, Any]) -> None:
            if kind == "recorded" and data["log"] is self:
                subscriber(data["event"])

        return BUS.subscribe(deliver)

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
