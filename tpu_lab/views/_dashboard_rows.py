"""The dashboard's rows, computed once: every label, byte count, grouping and colour that the live
widget (widgets/dashboard.js) and the static view (text and HTML, :mod:`._dashboard_view`) draw.

The dashboard's state (:class:`DashboardState`, what ``Dashboard.state()`` returns) holds
figures: the device, its chips' HBM, the cache counters, the kept events, the events per cell
and each timed cell's host time and estimated TPU time. :func:`rows` turns it into what the
front end receives (typed in :mod:`._widget_protocol`): the header, a gauge per chip, the
counters and the event feed.
"""

from __future__ import annotations

import collections
import math
import time
from typing import TypedDict

from ..events import KINDS, Event
from ..units import format_bytes
from ._widget_protocol import (
    Counters,
    Feed,
    Gauge,
    Gauges,
    Group,
    Header,
    ModeOption,
    Row,
)
from .base import counted
from .estimate import seconds_text
from .events import short_where


class DeviceState(TypedDict):
    """What the process runs on."""

    backend: str
    simulated: bool
    device_name: str
    topology: str
    topology_shape: list[int]
    chips: int
    devices_in_process: int


class ChipState(TypedDict):
    """One chip of the topology; ``driven`` chips belong to this process and carry their HBM."""

    index: int
    driven: bool
    capacity: int
    live: int
    peak: int
    measured: bool


class CacheState(TypedDict):
    """The eager compile cache (graphs and single ops) and torch.compile counts."""

    requests: int
    hits: int
    misses: int
    compiles: int
    recompiles: int


class EventState(TypedDict):
    """One kept event."""

    seq: int
    kind: str
    summary: str
    cell: int | None
    where: str
    time: float
    #: ExplanationView(event).to_html() for recompile and cache_miss events, else "".
    explanation: str


class CellState(TypedDict):
    """How many events of each kind a cell caused in total, also those no longer kept."""

    cell: int | None
    total: int
    counts: dict[str, int]


class CellTimeState(TypedDict):
    """A finished cell's host time (seconds) and its estimate's line ("" on a real TPU); ``seq``
    is the newest event when it ended."""

    cell: int | None
    seq: int
    host: float
    estimate: str


class DashboardState(TypedDict):
    device: DeviceState
    chips: list[ChipState]
    cache: CacheState
    events: list[EventState]  # oldest first
    cells: list[CellState]
    times: list[CellTimeState]  # the timed cells, oldest first
    seen: int  # events since the dashboard opened
    modes: list[ModeOption]
    eager_mode: str
    error: str
    updates: int


class DashboardRows(TypedDict):
    header: Header
    gauges: Gauges
    counters: Counters
    feed: Feed


#: Each kind's name in a row of the feed (short: a column of its own).
LABELS = {
    "compile": "compile",
    "recompile": "recompile",
    "cache_hit": "cache hit",
    "cache_miss": "cache miss",
    "sync": "sync",
    "transfer": "transfer",
    "oom": "OOM",
    "mode_change": "mode",
}
#: Each kind's name in a cell's counts ("2 mode changes").
_COUNTED = {**LABELS, "mode_change": "mode change"}
#: Kinds that come by the hundred: one row per kind and place in a cell, with a count.
ROUTINE = frozenset({"sync", "transfer", "cache_hit"})
#: Kinds kept in the feed even when a flood of routine events pushes them out of it.
NOTABLE = frozenset(KINDS) - ROUTINE
#: Rows drawn as alerts.
_ALERTS = frozenset({"recompile", "oom"})


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


def rows(state: DashboardState) -> DashboardRows:
    return {
        "header": header(state["device"]),
        "gauges": gauges(state["device"], state["chips"]),
        "counters": counters(state["cache"], state["eager_mode"]),
        "feed": feed(state["events"], state["cells"], state["seen"], state["times"]),
    }


def header(device: DeviceState) -> Header:
    shape = ",".join(map(str, device["topology_shape"]))
    return {
        "title": device["device_name"],
        "subtitle": f"{device['topology']} ({shape}), {counted(device['chips'], 'chip')}; "
        f"this process drives {device['devices_in_process']}",
        "backend": device["backend"],
    }


def gauges(device: DeviceState, chips: list[ChipState]) -> Gauges:
    shape = device["topology_shape"]
    across = max(1, shape[0]) if shape else 1
    return {
        "columns": min(len(chips) if across == 1 else across, 4),
        "chips": [_gauge(chip) for chip in chips],
    }


def _gauge(chip: ChipState) -> Gauge:
    capacity = format_bytes(chip["capacity"])
    meter = chip["driven"] and chip["measured"] and chip["capacity"] > 0
    if not chip["driven"]:
        usage = f"{capacity}, driven by another process"
        lines = [f"{capacity} · driven by another process"]
    elif not chip["measured"]:
        usage = f"{capacity}, usage not reported by this backend"
        lines = [f"{capacity} · usage not reported"]
    else:
        live, peak = format_bytes(chip["live"]), format_bytes(chip["peak"])
        usage = f"{live} / {capacity}, peak {peak}"
        lines = [f"{live} of {capacity}", f"peak {peak}"]
    return {
        "name": f"chip {chip['index']}",
        "tag": "this process" if chip["driven"] else "other process",
        "driven": chip["driven"],
        "meter": meter,
        "live": 100 * chip["live"] / chip["capacity"] if meter else 0.0,
        "peak": 100 * chip["peak"] / chip["capacity"] if meter else 0.0,
        "usage": usage,
        "lines": lines,
    }


def counters(cache: CacheState, eager_mode: str) -> Counters:
    """The cache's counters since the kernel started, and what they count in ``eager_mode``
    (in DEFER_NEVER every eager op is a cached program: a high hit rate with nothing of yours
    compiled)."""
    from ..session import cache_note

    requests, hits = cache["requests"], cache["hits"]
    rate = math.floor(100 * hits / requests + 0.5) if requests else 0  # half up, as people round
    return {
        "rate": f"{rate}%" if requests else "—",
        "fill": 100 * hits / requests if requests else 0.0,
        "hit_rate": f"{rate}% ({hits} of {requests} lookups since the kernel started)"
        if requests
        else "no lookups yet",
        "detail": f"hit rate · {hits} hits, {cache['misses']} misses of {requests} lookups "
        "since the kernel started"
        if requests
        else "hit rate · no lookups yet",
        "compiles": counted(cache["compiles"], "compile"),
        "recompiles": counted(cache["recompiles"], "recompile"),
        "warn": cache["recompiles"] > 0,
        "note": cache_note(eager_mode),
    }


def timing(t: CellTimeState) -> str:
    """``host 12.3 ms (simulated device) · estimated on an idealised TPU v6e chip (...)``."""
    host = f"host {seconds_text(t['host'])}"
    return f"{host} (simulated device) · {t['estimate']}" if t["estimate"] else host


def feed(events: list[EventState], cells: list[CellState], seen: int,
         times: list[CellTimeState]) -> Feed:
    """The events grouped by cell, newest cell first, in order within a cell; routine events
    collapsed (:func:`collapse`); the newest recompile's explanation open; each timed cell's
    host and estimated TPU time (also for a timed cell without events)."""
    totals = {c["cell"]: c for c in cells}
    timed = {t["cell"]: t for t in times}
    recompiles = [e["seq"] for e in events if e["kind"] == "recompile"]
    newest = recompiles[-1] if recompiles else None
    grouped = _by_cell(events)
    shown = {cell for cell, _ in grouped}
    ordered = sorted([(members[-1]["seq"], cell, members) for cell, members in grouped]
                     + [(t["seq"] + 0.5, t["cell"], []) for t in times if t["cell"] not in shown],
                     key=lambda item: item[0], reverse=True)
    groups: list[Group] = []
    for position, (_, cell, members) in enumerate(ordered):
        known = totals.get(cell)
        counts = known["counts"] if known else collections.Counter(e["kind"] for e in members)
        groups.append(
            {
                "key": str(cell),
                "title": f"In [{cell}]" if cell is not None else "outside a cell",
                "total": counted(known["total"] if known else len(members), "event"),
                "badges": [
                    {"kind": kind, "text": counted(n, _COUNTED[kind])} for kind, n in counts.items()
                ],
                "timing": timing(timed[cell]) if cell in timed else "",
                "open": position == 0 or any(e["kind"] in NOTABLE for e in members),
                "rows": [_row(e, n, summary, newest) for e, n, summary in collapse(members)],
            }
        )
    return {"shown": f"{len(events)} shown of {seen:,}", "groups": groups}


def _by_cell(events: list[EventState]) -> list[tuple[int | None, list[EventState]]]:
    """Events grouped by cell, newest cell first, events in order within a cell."""
    groups: dict[int | None, list[EventState]] = {}
    for event in events:
        groups.setdefault(event["cell"], []).append(event)
    return sorted(groups.items(), key=lambda item: item[1][-1]["seq"], reverse=True)


def collapse(events: list[EventState]) -> list[tuple[EventState, int, str]]:
    """``(event, count, summary)`` per row: routine events of one kind and place collapse into
    one row (at their first occurrence; the summary says how many where they differ); every
    other event keeps its own row."""
    rows: list[list] = []
    seen: dict[tuple[str, str], list] = {}
    for e in events:
        key = (e["kind"], e["where"])
        if e["kind"] in ROUTINE and key in seen:
            row = seen[key]
            row[1] += 1
            row[3] = row[3] or row[2] != e["summary"]
            continue
        row = [e, 1, e["summary"], False]
        rows.append(row)
        if e["kind"] in ROUTINE:
            seen[key] = row
    return [
        (e, n, f"{n} {LABELS[e['kind']]} events, first: {first}" if mixed else first)
        for e, n, first, mixed in rows
    ]


def _row(e: EventState, count: int, summary: str, newest_recompile: int | None) -> Row:
    return {
        "seq": e["seq"],
        "kind": e["kind"],
        "label": LABELS[e["kind"]],
        "clock": time.strftime("%H:%M:%S", time.localtime(e["time"])),
        "summary": summary,
        "times": f"×{count}" if count > 1 and summary == e["summary"] else "",
        "where": e["where"],
        "explanation": e["explanation"],
        "alert": e["kind"] in _ALERTS,
        "why_open": e["seq"] == newest_recompile,
    }
