"""HBM per chip: live, peak and capacity, as text bars, HTML bars and a matplotlib figure."""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass

from ..units import MemoryStats, format_bytes
from .base import View, clip, esc, terminal_width

LIVE, PEAK, FREE = "█", "▒", "░"
_LIVE_COLOR, _PEAK_COLOR, _FREE_COLOR = "#2563eb", "#93c5fd", "#e5e7eb"
_FONT = "font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:12px"


@dataclass(frozen=True)
class ChipMemory:
    """One chip's HBM as a view shows it: ``label`` such as ``"tpu:0"``."""

    label: str
    stats: MemoryStats


def _cells(part: int, capacity: int, width: int) -> int:
    if capacity <= 0 or part <= 0:
        return 0
    return min(width, max(1, round(part / capacity * width)))


def text_bar(m: MemoryStats, width: int) -> str:
    """``███▒▒░░░░░``: live, then peak beyond live, then free HBM, ``width`` characters."""
    live = _cells(m.live, m.capacity, width)
    peak = max(live, _cells(m.peak, m.capacity, width))
    return LIVE * live + PEAK * (peak - live) + FREE * (width - peak)


def percent(m: MemoryStats) -> float:
    return 100.0 * m.live / m.capacity if m.capacity else 0.0


def usage_text(m: MemoryStats) -> str:
    return (
        f"live {format_bytes(m.live)}  peak {format_bytes(m.peak)}  "
        f"of {format_bytes(m.capacity)}"
    )


def html_bar(m: MemoryStats, width_px: int = 240) -> str:
    """A self-contained (inline styles, no script) bar: live, peak beyond live, free."""
    cap = m.capacity or 1
    live = min(100.0, 100.0 * m.live / cap)
    peak = max(live, min(100.0, 100.0 * m.peak / cap))
    tip = esc(f"{usage_text(m)} ({percent(m):.1f}% in use)")
    return (
        f"<div title='{tip}' style='display:flex;width:{width_px}px;height:12px;"
        f"background:{_FREE_COLOR};border-radius:2px;overflow:hidden'>"
        f"<div style='width:{live:.2f}%;background:{_LIVE_COLOR}'></div>"
        f"<div style='width:{peak - live:.2f}%;background:{_PEAK_COLOR}'></div></div>"
    )


class MemoryView(View):
    """HBM of the chips this process drives (TorchTPU: one per process), with a note on the
    others of the topology."""

    def __init__(
        self, chips: Sequence[ChipMemory], title: str = "HBM per chip", note: str | None = None
    ) -> None:
        self.chips = tuple(chips)
        self.title = title
        self.note = note

    @classmethod
    def current(cls) -> MemoryView:
        """The chip of this process, read from the active backend."""
        from ..runtime import backend

        s = backend().status()
        index = s.chip_index
        note = None
        if s.chips > s.devices_in_process:
            others = s.chips - s.devices_in_process
            note = (
                f"this process drives chip {index} of the {s.chips} chips of {s.topology}; "
                f"the other {others} belong to other processes, one chip each (%tpu cluster)"
            )
        label = f"tpu:0 (chip {index})" if s.chips > 1 else "tpu:0"
        return cls([ChipMemory(label, s.memory)], f"HBM per chip ({s.device_name})", note)

    def _row(self, c: ChipMemory, width: int, label_width: int) -> str:
        m = c.stats
        head = f"  {c.label:<{label_width}}  "
        if not m.measured:
            return head + f"{format_bytes(m.capacity)} per chip; usage not reported by this backend"
        tail = f"  {percent(m):5.1f}%  {usage_text(m)}"
        bar = max(10, width - len(head) - len(tail))
        return head + text_bar(m, bar) + tail

    def to_text(self, width: int | None = None) -> str:
        width = terminal_width(width)
        label_width = max((len(c.label) for c in self.chips), default=0)
        lines = [self.title]
        lines += [self._row(c, width, label_width) for c in self.chips]
        if any(c.stats.measured for c in self.chips):
            lines.append(f"  {LIVE} live  {PEAK} peak  {FREE} free")
        if self.note:
            lines.append(clip(f"  {self.note}", width))
        return "\n".join(lines)

    def to_html(self) -> str:
        rows = []
        for c in self.chips:
            m = c.stats
            label = f"<td style='padding:2px 8px;white-space:nowrap'>{esc(c.label)}</td>"
            if not m.measured:
                rows.append(
                    f"<tr>{label}<td colspan='3' style='padding:2px 8px'>"
                    f"{esc(format_bytes(m.capacity))} per chip; usage not reported by this "
                    "backend</td></tr>"
                )
                continue
            rows.append(
                f"<tr>{label}<td style='padding:2px 8px'>{html_bar(m)}</td>"
                f"<td style='padding:2px 8px;text-align:right'>{percent(m):.1f}%</td>"
                f"<td style='padding:2px 8px;color:#374151'>{esc(usage_text(m))}</td></tr>"
            )
        legend = (
            "<div style='color:#6b7280'>"
            + "".join(
                f"<span style='display:inline-block;width:10px;height:10px;background:{color};"
                f"margin:0 4px 0 8px'></span>{name}"
                for color, name in ((_LIVE_COLOR, "live"), (_PEAK_COLOR, "peak"),
                                    (_FREE_COLOR, "free"))  # fmt: skip
            )
            + "</div>"
        )
        note = f"<div style='color:#6b7280'>{esc(self.note)}</div>" if self.note else ""
        return (
            f"<div style='{_FONT}'><b>{esc(self.title)}</b>"
            f"<table style='{_FONT};border-collapse:collapse'>{''.join(rows)}</table>"
            f"{legend}{note}</div>"
        )

    def figure(self):
        """A matplotlib Figure: one horizontal bar per chip (capacity, peak, live, in GiB)."""
        from matplotlib.figure import Figure

        gib = float(1 << 30)
        fig = Figure(figsize=(7, 0.6 + 0.5 * max(len(self.chips), 1)), layout="constrained")
        ax = fig.add_subplot()
        labels = [c.label for c in self.chips]
        y = range(len(self.chips))
        ax.barh(y, [c.stats.capacity / gib for c in self.chips], color=_FREE_COLOR, label="free")
        ax.barh(y, [c.stats.peak / gib for c in self.chips], color=_PEAK_COLOR, label="peak")
        ax.barh(y, [c.stats.live / gib for c in self.chips], color=_LIVE_COLOR, label="live")
        ax.set_yticks(list(y), labels)
        ax.invert_yaxis()
        ax.set_xlabel("HBM (GiB)")
        ax.set_title(self.title)
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
        return fig

    def png(self) -> bytes:
        """:meth:`figure` as PNG bytes (for a static image in a saved notebook)."""
        return figure_png(self.figure())


def figure_png(fig) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    return buffer.getvalue()
