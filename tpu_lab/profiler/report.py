"""A recorded profile (frozen data): the ops, sync points, compilations, cache hits/misses and
transfers of a block, a per-op table, a summary line and a Chrome/Perfetto trace file; on the
bundled device also the block's estimate on an idealised chip (its ops one after another in
estimated time, and the estimate's per-op costs). Its picture (the timelines and the tables) is
:class:`tpu_lab.views.profile.ProfileView`."""

from __future__ import annotations

import json
import os
from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .._drawn import Drawn

if TYPE_CHECKING:
    from ..estimate.result import Estimate

#: Timeline lanes, top to bottom.
LANES = ("ops", "sync", "compile", "cache", "transfer")
_COUNTED = (
    ("sync", "sync", "syncs"),
    ("compile", "compilation", "compilations"),
    ("cache_miss", "cache miss", "cache misses"),
    ("cache_hit", "cache hit", "cache hits"),
    ("transfer", "transfer", "transfers"),
)


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
class EstimatedSpan:
    """One step of the estimated timeline (an op, a fused graph, a compiled graph's call), in
    µs of estimated time on an idealised chip from the block's start: an estimate, not a
    measurement."""

    name: str
    start_us: float
    dur_us: float
    bound: str


@dataclass(frozen=True)
class OpStats:
    name: str
    calls: int
    total_us: float

    @property
    def mean_us(self) -> float:
        return self.total_us / self.calls


@dataclass(frozen=True)
class Profile(Drawn):
    """What a block did, in host time (on the bundled device: the CPU simulating the chip)."""

    label: str
    total_us: float
    ops: tuple[OpSpan, ...]
    events: tuple[EventSpan, ...]
    simulated: bool = True
    #: The block's estimate on an idealised chip (the bundled device only), and its steps.
    estimate: Estimate | None = None
    estimated: tuple[EstimatedSpan, ...] = ()

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

    # --- Chrome / Perfetto trace --------------------------------------------------------------

    def chrome_trace(self) -> dict:
        """The profile as a Chrome trace (``chrome://tracing``, https://ui.perfetto.dev)."""
        tids = {lane: i for i, lane in enumerate(LANES)}
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
        if self.estimate is not None:
            where = f"estimated TPU: {self.estimate.idealised_chip}, not a measurement"
            events.append({"ph": "M", "name": "process_name", "pid": 1, "args": {"name": where}})
            events += [{"ph": "X", "name": s.name, "pid": 1, "tid": 0, "ts": s.start_us,
                        "dur": s.dur_us, "args": {"bound": s.bound}} for s in self.estimated]
        return {"traceEvents": events, "displayTimeUnit": "ms",
                "otherData": {"label": self.label, "clock": self.clock}}  # fmt: skip

    def export_chrome_trace(self, path: str | os.PathLike) -> str:
        """Write :meth:`chrome_trace` as JSON to ``path``; returns the path."""
        with open(path, "w") as f:
            json.dump(self.chrome_trace(), f)
        return os.fspath(path)
