"""The event bus: the one way tpu_lab says that something happened on the device.

Publishers call :meth:`Bus.emit` with a kind and plain data: the bundled device (``sync``,
``transfer``, ``cache_hit``, ``cache_miss``, ``cache_cleared``, ``oom``, ``compile_requested``;
:meth:`tpu_lab.device.process.Device.publish`, mode changes included), the TorchTPU adapter
(``mode_change``, with the ``old`` and ``new`` modes) and the IPython cell follower
(``cell_finished``, with the ``cell`` number; :mod:`.context`). The subscriber is the event
log's collector (:mod:`.device_collector`); whoever wants the events subscribes to the log
(:meth:`tpu_lab.events.EventLog.subscribe`), which sends them on with the device's state.
Subscribers get ``(kind, data)`` for every message, in the order they were emitted, and must
not raise. Emitting with no subscriber costs one check.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

Subscriber = Callable[[str, dict[str, Any]], None]


class Bus:
    """Publish and subscribe, in process. ``subscribers`` is one list, changed in place, so
    that a publisher may test it (``if bus.subscribers:``) before building a message."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.subscribers: list[Subscriber] = []

    def emit(self, kind: str, **data: Any) -> None:
        for subscriber in tuple(self.subscribers):
            subscriber(kind, data)

    def subscribe(self, subscriber: Subscriber) -> Callable[[], None]:
        """Call ``subscriber(kind, data)`` for every message; returns a function that
        unsubscribes (it may be called more than once)."""
        with self._lock:
            self.subscribers.append(subscriber)

        def unsubscribe() -> None:
            with self._lock:
                if subscriber in self.subscribers:
                    self.subscribers.remove(subscriber)

        return unsubscribe


#: The process's bus.
BUS = Bus()
