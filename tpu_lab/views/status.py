"""The status of the "tpu" device in one view: backend, generation, chips, topology, HBM, eager
mode, compile-cache hit rate and the latest events (``%tpu status``)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from ..events import KINDS, Event
from ..runtime.base import DeviceStatus
from ..session import mode_of
from ..units import format_bytes
from .base import View, clip, counted, esc, terminal_width
from .events import EventLogView
from .memory import html_bar, percent, text_bar, usage_text

_FONT = "font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:12px"


def device_view(status: DeviceStatus) -> StatusView:
    """The view of a :class:`DeviceStatus` alone (``tpu_lab.status()``)."""
    return StatusView(status, record=False)


class StatusView(View):
    """Built from plain data (a :class:`DeviceStatus`, the cache counters, events), so that it
    renders the same anywhere; :meth:`current` reads them from this process. With ``record``
    False only the device is shown (the view of a :class:`DeviceStatus` alone)."""

    def __init__(
        self,
        status: DeviceStatus,
        cache: Mapping[str, int] | None = None,
        recent: Sequence[Event] = (),
        counts: Mapping[str, int] | None = None,
        dropped: int = 0,
        *,
        record: bool = True,
    ) -> None:
        self.status = status
        self.cache = dict(cache) if cache is not None else None
        self.recent = tuple(recent)
        self.counts = dict(counts) if counts is not None else dict(Counter(e.kind for e in recent))
        self.dropped = dropped
        self.record = record

    @classmethod
    def current(cls, recent: int = 5) -> StatusView:
        """This process: the active backend, its cache counters and the event log."""
        from ..events import log
        from ..runtime import backend

        b = backend()
        events = log.events()
        return cls(
            b.status(),
            b.cache_stats(),
            events[-recent:] if recent > 0 else (),
            Counter(e.kind for e in events),
            log.dropped,
        )

    def _rows(self) -> list[tuple[str, str]]:
        s = self.status
        kind = "simulated on the CPU" if s.simulated else "hardware"
        shape = ",".join(map(str, s.topology_shape)) or "?"
        known = mode_of(s.eager_mode)
        rows = [
            ("backend", f"{s.backend} ({kind})"),
            ("generation", s.device_name),
            (
                "topology",
                f"{s.topology}, {self._chips_text()} (mesh {shape}); "
                f"this process drives {s.devices_in_process} (tpu:0)",
            ),
            ("eager mode", s.eager_mode + (f" ({known.value})" if known else "")),
        ]
        if self.record:
            rows += [("compile cache", self._cache_text()), ("events", self._events_text())]
        return rows

    def _chips_text(self) -> str:
        """``4 chips``, or on a pod slice ``16 chips: 4 hosts x 4 chips``."""
        s = self.status
        if s.hosts <= 1:
            return counted(s.chips, "chip")
        return (
            f"{counted(s.chips, 'chip')}: {s.hosts} hosts x {counted(s.chips // s.hosts, 'chip')}"
        )

    def _cache_text(self) -> str:
        c = self.cache
        if c is None:
            return "counters not reported by this backend"
        if not c.get("requests"):
            return "no lookups yet (each eager op, and each DEFER_AND_FUSE graph, is one)"
        rate = 100.0 * c["hits"] / c["requests"]
        return (
            f"{rate:.0f}% hit rate: {c['hits']} of {c['requests']} lookups, "
            f"{c['misses']} compilation(s), since the kernel started"
        )

    def _events_text(self) -> str:
        total = sum(self.counts.values())
        parts = [f"{self.counts[k]} {k}" for k in KINDS if self.counts.get(k)]
        text = f"{total} kept" + (f" ({self.dropped} older dropped)" if self.dropped else "")
        return text + (": " + ", ".join(parts) if parts else "")

    def _hbm_text(self, width: int) -> str:
        m = self.status.memory
        head = f"  {'HBM tpu:0':<13} "
        if not m.measured:
            return head + f"{format_bytes(m.capacity)} per chip; usage not reported"
        tail = f"  {percent(m):5.1f}%  {usage_text(m)}"
        return head + text_bar(m, max(10, width - len(head) - len(tail))) + tail

    def to_text(self, width: int | None = None) -> str:
        width = terminal_width(width)
        rows = self._rows()
        lines = ["tpu_lab status"]
        lines += [clip(f"  {name:<13} {value}", width) for name, value in rows[:3]]
        lines.append(self._hbm_text(width))
        lines += [clip(f"  {name:<13} {value}", width) for name, value in rows[3:]]
        if self.recent:
            lines.append(EventLogView(self.recent, "recent events").to_text(width))
        return "\n".join(lines)

    def to_html(self) -> str:
        m = self.status.memory
        if m.measured:
            hbm = (
                f"<div style='display:flex;gap:8px;align-items:center'>{html_bar(m)}"
                f"<span>{percent(m):.1f}%  {esc(usage_text(m))}</span></div>"
            )
        else:
            hbm = esc(f"{format_bytes(m.capacity)} per chip; usage not reported")
        rows = self._rows()
        cells = [(name, esc(value)) for name, value in rows[:3]]
        cells.append(("HBM tpu:0", hbm))
        cells += [(name, esc(value)) for name, value in rows[3:]]
        body = "".join(
            f"<tr><td style='padding:2px 8px;color:#6b7280;white-space:nowrap;"
            f"vertical-align:top'>{esc(name)}</td><td style='padding:2px 8px'>{value}</td></tr>"
            for name, value in cells
        )
        recent = ""
        if self.recent:
            recent = EventLogView(self.recent, "recent events").to_html()
        return (
            f"<div style='{_FONT}'><b>tpu_lab status</b>"
            f"<table style='{_FONT};border-collapse:collapse'>{body}</table>{recent}</div>"
        )
