"""Compilations over time and notebook cells, each recompile with what changed
(``%tpu recompiles``); as text, HTML and a matplotlib figure."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from ..events import Event
from .base import View, clip, counted, esc, terminal_width
from .events import hints_html, short_where
from .memory import figure_png
from .palette import KIND_COLORS, TEXT

#: The events a timeline shows: every compilation of torch.compile and of the eager cache.
TIMELINE_KINDS = ("compile", "recompile", "cache_miss")
_FONT = "font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:12px"


def _what(e: Event) -> str:
    """What changed (recompiles, cache misses) or what was compiled (first compilations)."""
    changes = e.details.get("changes") or ()
    return "; ".join(changes) if changes else e.summary


def _cell(cell: int | None) -> str:
    return f"[{cell}]" if cell is not None else "-"


class RecompileTimelineView(View):
    """Compilations, recompilations and eager-cache misses in order, with per-cell counts."""

    def __init__(self, events: Sequence[Event], title: str = "recompile timeline") -> None:
        self.events = tuple(e for e in events if e.kind in TIMELINE_KINDS)
        self.title = title

    @classmethod
    def current(cls, cell: int | None = None) -> RecompileTimelineView:
        from ..events import log

        return cls(log.events(TIMELINE_KINDS, cell))

    def _headline(self) -> str:
        counts = Counter(e.kind for e in self.events)
        cells = {e.cell for e in self.events if e.cell is not None}
        seconds = sum(
            e.details.get("compile_seconds", 0.0) for e in self.events if e.kind != "cache_miss"
        )
        parts = [
            counted(counts["recompile"], "recompile"),
            counted(counts["compile"], "compile"),
            counted(counts["cache_miss"], "cache miss"),
        ]
        where = f" in {counted(len(cells), 'cell')}" if cells else ""
        return f"{self.title}: {', '.join(parts)}{where}; {seconds:.2f} s compiling"

    def _per_cell(self) -> list[tuple[str, int, bool]]:
        """(cell, recompiles + cache misses, storm) for cells that recompiled."""
        counts: Counter[int | None] = Counter()
        storms: set[int | None] = set()
        for e in self.events:
            if e.kind != "compile":
                counts[e.cell] += 1
                if e.details.get("storm"):
                    storms.add(e.cell)
        return [(_cell(c), n, c in storms) for c, n in counts.items()]

    def _offset(self, e: Event) -> str:
        return f"+{e.time - self.events[0].time:.2f} s"

    def to_text(self, width: int | None = None) -> str:
        width = terminal_width(width)
        lines = [clip(self._headline(), width)]
        if not self.events:
            return lines[0] + "\n  (no compilations yet)"
        offsets = [self._offset(e) for e in self.events]
        sites = [short_where(e.where) or "?" for e in self.events]
        tw, sw = max(map(len, offsets)), max(max(map(len, sites)), len("call site"))
        cw = max(max(len(_cell(e.cell)) for e in self.events), len("cell"))
        lines.append(
            f"  {'cell':<{cw}}  {'time':>{tw}}  {'kind':<10}  {'call site':<{sw}}  what changed"
        )
        for e, offset, site in zip(self.events, offsets, sites, strict=True):
            head = f"  {_cell(e.cell):<{cw}}  {offset:>{tw}}  {e.kind:<10}  {site:<{sw}}  "
            lines.append(head + clip(_what(e), max(width - len(head), 10)))
        per_cell = self._per_cell()
        if per_cell:
            lines.append("recompiles per cell")
            most = max(n for _, n, _ in per_cell)
            lw = max(len(c) for c, _, _ in per_cell)
            room = min(max(width - lw - 30, 10), 40)
            for cell, n, storm in per_cell:
                bar = "█" * max(1, round(n / most * room))
                storm_text = "  recompilation storm" if storm else ""
                lines.append(f"  {cell:<{lw}}  {bar} {n}{storm_text}")
        return "\n".join(lines)

    def to_html(self) -> str:
        rows = []
        for e in self.events:
            color = KIND_COLORS.get(e.kind, TEXT)
            rows.append(
                "<tr style='border-top:1px solid #e5e7eb'>"
                f"<td style='padding:2px 6px;color:#6b7280'>{esc(_cell(e.cell))}</td>"
                f"<td style='padding:2px 6px;color:#6b7280;text-align:right'>"
                f"{esc(self._offset(e))}</td>"
                f"<td style='padding:2px 6px;color:{color};font-weight:600'>{esc(e.kind)}</td>"
                f"<td style='padding:2px 6px;color:#6b7280'>{esc(short_where(e.where))}</td>"
                f"<td style='padding:2px 6px'>{esc(_what(e))}{hints_html(e)}</td></tr>"
            )
        if not rows:
            rows.append("<tr><td colspan='5' style='padding:4px'>(no compilations yet)</td></tr>")
        head = "".join(
            f"<th style='padding:2px 6px'>{h}</th>"
            for h in ("cell", "time", "kind", "call site", "what changed")
        )
        per_cell = self._per_cell()
        bars = ""
        if per_cell:
            most = max(n for _, n, _ in per_cell)
            bars = "<div style='margin-top:6px'><b>recompiles per cell</b>" + "".join(
                "<div style='display:flex;gap:6px;align-items:center'>"
                f"<span style='display:inline-block;width:48px'>{esc(cell)}</span>"
                f"<span style='display:inline-block;height:10px;width:{max(4, 200 * n // most)}px;"
                f"background:{'#b91c1c' if storm else '#dc2626'}'></span><span>{n}"
                f"{' recompilation storm' if storm else ''}</span></div>"
                for cell, n, storm in per_cell
            ) + "</div>"
        return (
            f"<div style='{_FONT}'><b>{esc(self._headline())}</b>"
            f"<table style='{_FONT};border-collapse:collapse'><thead><tr style='text-align:left'>"
            f"{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>{bars}</div>"
        )

    def figure(self):
        """A matplotlib Figure: each compilation at its time (x) and call site (y), coloured by
        kind, recompiles labelled with what changed."""
        from matplotlib.figure import Figure

        sites = list(dict.fromkeys(short_where(e.where) or "?" for e in self.events))
        fig = Figure(figsize=(8, 1.2 + 0.4 * max(len(sites), 1)), layout="constrained")
        ax = fig.add_subplot()
        start = self.events[0].time if self.events else 0.0
        for kind in TIMELINE_KINDS:
            chosen = [e for e in self.events if e.kind == kind]
            if chosen:
                ax.scatter(
                    [e.time - start for e in chosen],
                    [sites.index(short_where(e.where) or "?") for e in chosen],
                    color=KIND_COLORS[kind],
                    label=kind,
                    zorder=3,
                )
        middle = (self.events[-1].time - start) / 2 if self.events else 0.0
        for e in self.events:
            if e.kind != "compile":
                left = e.time - start <= middle  # labels run away from the nearer edge
                ax.annotate(
                    clip(_what(e), 48),
                    (e.time - start, sites.index(short_where(e.where) or "?")),
                    xytext=(5 if left else -5, 5),
                    textcoords="offset points",
                    ha="left" if left else "right",
                    fontsize=7,
                )
        ax.set_yticks(range(len(sites)), sites)
        ax.set_xlabel("seconds since the first compilation")
        ax.set_title(self._headline(), fontsize=9)
        ax.grid(axis="x", alpha=0.3)
        ax.margins(x=0.05, y=0.4)
        if self.events:
            ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
        return fig

    def png(self) -> bytes:
        """:meth:`figure` as PNG bytes."""
        return figure_png(self.figure())
