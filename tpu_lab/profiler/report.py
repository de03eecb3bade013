"""A recorded profile (frozen data) and its pictures: a timeline of ops, sync points,
compilations, cache hits/misses and transfers; a per-op table; a Chrome/Perfetto trace file."""

from __future__ import annotations

import dataclasses
import json
import os
from collections import defaultdict
from dataclasses import dataclass

from ..views.base import View, clip, esc, terminal_width

#: Timeline lanes, top to bottom, and their colours in the HTML picture.
LANE_COLOURS = {
    "ops": "#4e79a7",
    "sync": "#e15759",
    "compile": "#f28e2b",
    "cache": "#76b7b2",
    "transfer": "#59a14f",
}
_COUNTED = (
    ("sync", "sync", "syncs"),
    ("compile", "compilation", "compilations"),
    ("cache_miss", "cache miss", "cache misses"),
    ("cache_hit", "cache hit", "cache hits"),
    ("transfer", "transfer", "transfers"),
)
_MARK = {"ops": "#", "sync": "S", "compile": "C", "cache": "c", "transfer": "T"}


@dataclass(frozen=True)
class OpSpan:
    """One op the user's code called (the outermost ATen op), in µs from the block's start."""

    name: str
    start_us: float
    dur_us: float
    shapes: tuple[tuple[int, ...], ...] = ()


@dataclass(frozen=True)
class EventSpan:
    """One event of tpu_lab's log inside the block: its lane, kind, text and time (µs)."""

    lane: str
    kind: str
    summary: str
    start_us: float
    dur_us: float
    where: str | None = None


@dataclass(frozen=True)
class OpStats:
    name: str
    calls: int
    total_us: float

    @property
    def mean_us(self) -> float:
        return self.total_us / self.calls


@dataclass(frozen=True)
class Profile(View):
    """What a block did, in host time (on the bundled device: the CPU simulating the chip)."""

    label: str
    total_us: float
    ops: tuple[OpSpan, ...]
    events: tuple[EventSpan, ...]
    simulated: bool = True
    #: How many ops the per-op table shows.
    top: int = 12

    def showing(self, top: int) -> Profile:
        """The same profile with ``top`` ops in its table."""
        return dataclasses.replace(self, top=top)

    @property
    def clock(self) -> str:
        return "host time on the simulated device, not TPU time" if self.simulated else (
            "host wall time on the TPU VM"
        )

    def table(self) -> list[OpStats]:
        """Per-op totals, the most expensive first."""
        calls: dict[str, int] = defaultdict(int)
        total: dict[str, float] = defaultdict(float)
        for op in self.ops:
            calls[op.name] += 1
            total[op.name] += op.dur_us
        return sorted(
            (OpStats(n, calls[n], total[n]) for n in calls), key=lambda s: (-s.total_us, s.name)
        )

    def count(self, kind: str) -> int:
        kinds = {"compile": ("compile", "recompile")}.get(kind, (kind,))
        return sum(e.kind in kinds for e in self.events)

    def summary(self) -> str:
        parts = [f"{len(self.ops)} ops"]
        for kind, one, many in _COUNTED:
            n = self.count(kind)
            if n:
                parts.append(f"{n} {one if n == 1 else many}")
        return (
            f"profile of {self.label}: {self.total_us / 1e3:.1f} ms ({self.clock}); "
            + ", ".join(parts)
        )

    # --- text -------------------------------------------------------------------------------

    def _lanes(self) -> dict[str, list[tuple[float, float]]]:
        lanes: dict[str, list[tuple[float, float]]] = {lane: [] for lane in LANE_COLOURS}
        lanes["ops"] = [(o.start_us, o.dur_us) for o in self.ops]
        for e in self.events:
            lanes[e.lane].append((e.start_us, e.dur_us))
        return lanes

    def to_text(self, width: int | None = None) -> str:
        width = terminal_width(width)
        span = max(self.total_us, 1.0)
        cols = max(width - 12, 20)
        lines = [clip(self.summary(), width), ""]
        for lane, items in self._lanes().items():
            row = [" "] * cols
            for start, dur in items:
                a = min(int(start / span * cols), cols - 1)
                b = min(max(int((start + dur) / span * cols), a + 1), cols)
                for i in range(max(a, 0), b):
                    row[i] = _MARK[lane]
            lines.append(f"{lane:>9} |{''.join(row)}|")
        lines.append(f"{'':>9}  0{'':{cols - 12}}{self.total_us / 1e3:8.1f} ms")
        lines.append("")
        lines.append(f"  {'op':<34}{'calls':>7}{'total ms':>11}{'mean µs':>10}{'share':>8}")
        for s in self.table()[: self.top]:
            share = s.total_us / span * 100
            lines.append(clip(f"  {s.name:<34}{s.calls:>7}{s.total_us / 1e3:>11.3f}"
                              f"{s.mean_us:>10.1f}{share:>7.1f}%", width))  # fmt: skip
        rest = len(self.table()) - self.top
        if rest > 0:
            lines.append(f"  ... {rest} more ops")
        for e in self.events:
            if e.lane in ("sync", "compile") or e.kind == "cache_miss":
                where = f"  ({e.where})" if e.where else ""
                lines.append(clip(f"  {e.start_us / 1e3:8.2f} ms  {e.kind:<10} {e.summary}{where}",
                                  width))  # fmt: skip
        return "\n".join(lines)

    # --- HTML: an inline SVG timeline (no scripts) and the per-op table ----------------------

    def svg(self, width: int = 760) -> str:
        lane_h, left = 22, 70
        lanes = self._lanes()
        height = lane_h * len(lanes) + 24
        span = max(self.total_us, 1.0)
        scale = (width - left - 10) / span
        out = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' "
               "font-family='sans-serif' font-size='11'>"]  # fmt: skip
        titles = {"ops": [f"{o.name} {o.dur_us:.1f} µs {list(o.shapes)}" for o in self.ops]}
        for lane in LANE_COLOURS:
            titles.setdefault(lane, [])
        for e in self.events:
            titles[e.lane].append(f"{e.kind}: {e.summary}" + (f" ({e.where})" if e.where else ""))
        for i, (lane, items) in enumerate(lanes.items()):
            y = i * lane_h + 4
            out.append(f"<text x='4' y='{y + 14}'>{lane}</text>")
            out.append(f"<rect x='{left}' y='{y}' width='{width - left - 10}' height='{lane_h - 4}'"
                       " fill='#f4f4f4'/>")  # fmt: skip
            for (start, dur), title in zip(items, titles[lane], strict=True):
                x = left + start * scale
                w = max(dur * scale, 1.5)
                out.append(f"<rect x='{x:.1f}' y='{y}' width='{w:.1f}' height='{lane_h - 4}' "
                           f"fill='{LANE_COLOURS[lane]}'><title>{esc(title)}</title></rect>")
        y = len(lanes) * lane_h + 18
        out.append(f"<text x='{left}' y='{y}'>0 ms</text>")
        out.append(f"<text x='{width - 10}' y='{y}' text-anchor='end'>"
                   f"{self.total_us / 1e3:.1f} ms</text></svg>")  # fmt: skip
        return "".join(out)

    def to_html(self) -> str:
        rows = "".join(
            f"<tr><td>{esc(s.name)}</td><td>{s.calls}</td><td>{s.total_us / 1e3:.3f}</td>"
            f"<td>{s.mean_us:.1f}</td><td>{s.total_us / max(self.total_us, 1) * 100:.1f}%</td></tr>"
            for s in self.table()[: self.top]
        )
        return (
            f"<div><b>{esc(self.summary())}</b><br>{self.svg()}"
            "<table><tr><th>op</th><th>calls</th><th>total ms</th><th>mean µs</th>"
            f"<th>share</th></tr>{rows}</table></div>"
        )

    # --- Chrome / Perfetto trace --------------------------------------------------------------

    def chrome_trace(self) -> dict:
        """The profile as a Chrome trace (``chrome://tracing``, https://ui.perfetto.dev)."""
        tids = {lane: i for i, lane in enumerate(LANE_COLOURS)}
        events = [
            {"ph": "M", "name": "thread_name", "pid": 0, "tid": tid, "args": {"name": lane}}
            for lane, tid in tids.items()
        ]
        events.append({"ph": "M", "name": "process_name", "pid": 0,
                       "args": {"name": f"tpu:0 ({self.clock})"}})  # fmt: skip
        for o in self.ops:
            events.append({"ph": "X", "name": o.name, "pid": 0, "tid": tids["ops"],
                           "ts": o.start_us, "dur": o.dur_us,
                           "args": {"shapes": [list(s) for s in o.shapes]}})  # fmt: skip
        for e in self.events:
            base = {"name": e.kind, "pid": 0, "tid": tids[e.lane], "ts": e.start_us,
                    "args": {"summary": e.summary, "where": e.where}}  # fmt: skip
            events.append({**base, "ph": "X", "dur": e.dur_us} if e.dur_us else
                          {**base, "ph": "i", "s": "t"})  # fmt: skip
        return {"traceEvents": events, "displayTimeUnit": "ms",
                "otherData": {"label": self.label, "clock": self.clock}}  # fmt: skip

    def export_chrome_trace(self, path: str | os.PathLike) -> str:
        """Write :meth:`chrome_trace` as JSON to ``path``; returns the path."""
        with open(path, "w") as f:
            json.dump(self.chrome_trace(), f)
        return os.fspath(path)
