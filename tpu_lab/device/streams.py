"""Streams and events of the bundled device.

The bundled device executes every op synchronously on the host, so a stream is always idle
and an event completes when it is recorded. The objects still behave like TorchTPU's (and
``torch.cuda``'s) so code that uses them runs unchanged; ``Event.elapsed_time`` measures host
time between two records, which on this device includes the work in between.
"""

from __future__ import annotations

import functools
import threading
import time
from contextlib import contextmanager

import torch

_NOT_IMPLEMENTED = (
    "Streams and Events are not fully implemented in TorchTPU. Please file a feature request "
    "describing your use case."
)


class Stream(torch.Stream):
    """``torch.tpu.Stream``: a queue of work on the device, always complete here. A
    ``torch.Stream`` of the compiled core's device guard, as TorchTPU's ``TpuStream`` is, so
    ``Tensor.record_stream`` and the ``torch.Stream`` APIs accept it."""

    def __new__(cls, device=None, priority: int = 0):
        device = torch.device("tpu", 0) if device is None else _device(device)
        return super().__new__(cls, device=device, priority=priority)

    def query(self) -> bool:
        raise NotImplementedError(_NOT_IMPLEMENTED)

    def priority_range(self):
        raise NotImplementedError(_NOT_IMPLEMENTED)

    def synchronize(self) -> None:
        return None

    def wait_stream(self, stream: Stream) -> None:
        return None

    def wait_event(self, event: Event) -> None:
        return None

    def record_event(self, event: Event | None = None) -> Event:
        event = Event() if event is None else event
        event.record(self)
        return event

    def __repr__(self) -> str:
        return "<torch.tpu.TpuStream>"


class Event:
    """A marker in a stream; records host time because the device is synchronous."""

    def __init__(
        self,
        enable_timing: bool = False,
        blocking: bool = False,
        interprocess: bool = False,
        external: bool = False,
        device=None,
    ) -> None:
        self.enable_timing = enable_timing
        self.blocking = blocking
        self._time: float | None = None

    def record(self, stream: Stream | None = None) -> Event:
        if stream is not None and not isinstance(stream, (Stream, torch.Stream)):
            raise TypeError(f"expected torch.Stream, but got {type(stream).__name__}")
        self._time = time.perf_counter()
        return self

    def query(self) -> bool:
        return self._time is not None

    def synchronize(self) -> None:
        return None

    def wait(self, stream: Stream | None = None) -> None:
        return None

    def elapsed_time(self, end_event: Event) -> float:
        """Milliseconds between this event and ``end_event`` (both need ``enable_timing``)."""
        if not (self.enable_timing and end_event.enable_timing):
            raise RuntimeError(
                "elapsed_time needs both events created with torch.tpu.Event(enable_timing=True)."
            )
        if self._time is None or end_event._time is None:
            raise RuntimeError("Both events must be recorded (event.record()) before elapsed_time.")
        return (end_event._time - self._time) * 1000.0

    def __repr__(self) -> str:
        return "<torch.tpu.TpuEvent>"


def _device(device) -> torch.device:
    if isinstance(device, int):
        return torch.device("tpu", device)
    dev = torch.device(device)
    if dev.type != "tpu":
        raise ValueError(f"Expected a 'tpu' device, got {str(dev)!r}.")
    return torch.device("tpu", dev.index or 0)


_local = threading.local()


@functools.cache
def default_stream(device=None) -> Stream:
    return Stream()


def current_stream(device=None) -> Stream:
    return getattr(_local, "stream", None) or default_stream()


def set_stream(stream: Stream) -> None:
    _local.stream = stream


@contextmanager
def stream(s: Stream | None):
    """Make ``s`` the current stream inside the block (``None``: no change)."""
    if s is None:
        yield
        return
    previous = current_stream()
    set_stream(s)
    try:
        yield
    finally:
        set_stream(previous)
