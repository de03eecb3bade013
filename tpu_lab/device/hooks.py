"""Observation points of the bundled device: what the event log listens to.

The device calls :func:`emit` at sync points, host<->device transfers, out-of-memory errors and
the first ``torch.compile``; it costs one list check when nobody observes. Observers get
``(kind, data)`` and must not raise.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Observer = Callable[[str, dict[str, Any]], None]
observers: list[Observer] = []


def emit(kind: str, **data: Any) -> None:
    for observer in observers:
        observer(kind, data)
