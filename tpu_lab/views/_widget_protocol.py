"""The messages between the dashboard's Python model and its front end (widgets/dashboard.js).

Everything the widget shows travels as synced traitlets whose values have the shapes below
(plain JSON). Python -> JS: every trait. JS -> Python: ``eager_mode`` only (the toggle). The
JSDoc typedefs at the top of ``widgets/dashboard.js`` mirror these ``TypedDict``s; change both
together.
"""

from __future__ import annotations

from typing import TypedDict

from ..events import Event
from ..session import EAGER_MODES
from .events import short_where


class DeviceState(TypedDict):
    """``device`` trait: what the process runs on."""

    backend: str
    simulated: bool
    device_name: str
    topology: str
    topology_shape: list[int]
    chips: int
    devices_in_process: int


class ChipState(TypedDict):
    """One entry of the ``chips`` trait: one chip of the topology, in index order.

    ``driven`` chips belong to this process and carry their HBM figures; the others are driven by
    other processes (TorchTPU: one chip per process) and show only their capacity.
    """

    index: int
    driven: bool
    capacity: int
    live: int
    peak: int
    measured: bool


class CacheState(TypedDict):
    """``cache`` trait: the eager compile cache (graphs and single ops) and torch.compile counts."""

    requests: int
    hits: int
    misses: int
    compiles: int
    recompiles: int


class EventState(TypedDict):
    """One entry of the ``events`` trait (oldest first)."""

    seq: int
    kind: str
    summary: str
    cell: int | None
    where: str
    time: float
    #: ExplanationView(event).to_html() for recompile and cache_miss events, else "".
    explanation: str


class CellState(TypedDict):
    """One entry of the ``cells`` trait: how many events of each kind a cell caused in total,
    also those no longer in ``events``."""

    cell: int | None
    total: int
    counts: dict[str, int]


class ModeOption(TypedDict):
    """One entry of the ``modes`` trait: a choice of the eager-mode toggle."""

    value: str  # a torch.tpu.EagerMode name
    label: str
    hint: str


#: The toggle's choices: the session's modes of :data:`tpu_lab.session.MODES`.
#: ``eager_mode`` may also hold another EagerMode name set from code.
MODES: list[ModeOption] = [
    {"value": m.eager_mode, "label": m.label, "hint": m.meaning} for m in EAGER_MODES
]

#: Event kinds kept in the feed even when a flood of other events pushes them out of it.
NOTABLE = frozenset({"compile", "recompile", "cache_miss", "oom", "mode_change"})


def event_state(event: Event) -> EventState:
    explanation = ""
    if event.kind in ("recompile", "cache_miss"):
        from .events import ExplanationView

        explanation = ExplanationView(event).to_html()
    return {
        "seq": event.seq,
        "kind": event.kind,
        "summary": event.summary,
        "cell": event.cell,
        "where": short_where(event.where),
        "time": event.time,
        "explanation": explanation,
    }
