"""The event log and a recompilation explanation, as text and HTML."""

from __future__ import annotations

import os
import textwrap

from ..errors import TpuLabError
from ..events import Event
from .base import View, clip, esc, terminal_width
from .palette import KIND_COLORS, TEXT

_STYLE = (
    "font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:12px;"
    "border-collapse:collapse"
)


def short_where(where: str | None) -> str:
    """``/long/path/to/file.py:12`` -> ``file.py:12`` (notebook cells keep their name)."""
    if not where:
        return ""
    path, _, line = where.rpartition(":")
    return f"{os.path.basename(path) or path}:{line}"


def hints_html(event: Event) -> str:
    """The fixes an event suggests, one line each, for a table cell."""
    return "".join(
        f"<div style='color:#374151'>fix: {esc(h)}</div>" for h in event.details.get("hints", ())
    )


class EventLogView(View):
    """A table of events: number, cell, kind, what happened, where; recompiles explained."""

    def __init__(self, events: list[Event], title: str = "tpu_lab events") -> None:
        self.events = list(events)
        self.title = title

    def to_text(self, width: int | None = None) -> str:
        width = terminal_width(width)
        lines = [f"{self.title} ({len(self.events)})"]
        if not self.events:
            return lines[0] + "\n  (none yet)"
        for e in self.events:
            cell = f"[{e.cell}]" if e.cell is not None else ""
            head = f"{e.seq:>5} {cell:>6} {e.kind:<11} "
            where = short_where(e.where)
            room = width - len(head) - len(where) - 2
            lines.append(f"{head}{clip(e.summary, max(room, 10)):<{max(room, 10)}}  {where}")
            for hint in e.details.get("hints", ()) if e.kind in ("recompile", "compile") else ():
                lines.append(clip(f"{'':>18}fix: {hint}", width))
        return "\n".join(lines)

    def to_html(self) -> str:
        rows = []
        for e in self.events:
            color = KIND_COLORS.get(e.kind, TEXT)
            cell = e.cell if e.cell is not None else ""
            rows.append(
                "<tr style='border-top:1px solid #e5e7eb'>"
                f"<td style='padding:2px 6px;color:#6b7280'>{e.seq}</td>"
                f"<td style='padding:2px 6px;color:#6b7280'>{esc(cell)}</td>"
                f"<td style='padding:2px 6px;color:{color};font-weight:600'>{esc(e.kind)}</td>"
                f"<td style='padding:2px 6px'>{esc(e.summary)}{hints_html(e)}</td>"
                f"<td style='padding:2px 6px;color:#6b7280'>{esc(short_where(e.where))}</td></tr>"
            )
        body = "".join(rows) or "<tr><td colspan='5' style='padding:4px'>(none yet)</td></tr>"
        return (
            f"<div><b>{esc(self.title)}</b> ({len(self.events)})"
            f"<table style='{_STYLE}'><thead><tr style='text-align:left'>"
            + "".join(
                f"<th style='padding:2px 6px'>{h}</th>"
                for h in ("#", "cell", "kind", "what happened", "where")
            )
            + "</tr></thead>"
            f"<tbody>{body}</tbody></table></div>"
        )


def explainable(event: Event) -> bool:
    """A recompile, a compile-cache miss or a graph break: an event with an explanation."""
    return event.kind in ("recompile", "cache_miss") or "graph_break" in event.details


def explain(seq: int | None = None) -> ExplanationView:
    """Why recompile, cache-miss or graph-break event ``seq`` happened (default: the latest),
    as a view (``tpu_lab.explain``, ``%tpu explain``)."""
    from ..events import log

    recompiles = [e for e in log.events(("recompile", "cache_miss", "compile"))
                  if explainable(e)]
    if seq is None:
        if not recompiles:
            raise TpuLabError("Nothing to explain: no recompilation or graph break has been "
                              "recorded yet.")
        return ExplanationView(recompiles[-1])
    match = [e for e in log.events() if e.seq == seq]
    if not match:
        raise TpuLabError(
            f"No event #{seq} in the log; recompile events: {[e.seq for e in recompiles]}."
        )
    return ExplanationView(match[0])


class ExplanationView(View):
    """Why one recompilation (torch.compile) or compile-cache miss (DEFER_AND_FUSE) happened:
    what changed against the closest compiled graph, the fix, the cost."""

    def __init__(self, event: Event) -> None:
        if not explainable(event):
            raise TpuLabError(
                f"Event {event.seq} is a {event.kind!r} event; only recompiles, cache misses "
                "and graph breaks have an explanation. List them with "
                "tpu_lab.event_log('recompile') or tpu_lab.event_log('cache_miss')."
            )
        self.event = event

    def _kind(self) -> str:
        return "graph break" if "graph_break" in self.event.details else (
            self.event.kind.replace("_", " "))

    def _facts(self) -> list[tuple[str, str]]:
        d = self.event.details
        if "graph_break" in d:
            b = d["graph_break"]
            return [("function", b["function"]),
                    ("called at", self.event.where or "unknown"),
                    ("the line", f"{b['at']}: {b['code']}" if b["code"] else b["at"]),
                    ("why it breaks", b["what"]),
                    ("how to fix", b["hint"]),
                    ("cost", b["effect"])]
        if self.event.kind == "cache_miss":
            facts = [
                ("sync point", f"{self.event.where or 'unknown'} ({d.get('reason', '')})"),
                ("graph", f"{d.get('ops', 0)} ops recorded since the previous sync point"),
            ]
        else:
            facts = [
                ("function", d.get("function", "")),
                ("called at", self.event.where or "unknown"),
                ("guard that failed", d.get("reason", "")),
            ]
        facts += [("what changed", change) for change in d.get("changes", ())]
        facts += [("how to fix", hint) for hint in d.get("hints", ())]
        if self.event.kind == "recompile":
            facts.append(
                (
                    "cost",
                    f"{d.get('compile_seconds', 0):.2f} s this time, "
                    f"{d.get('site_compile_seconds', 0):.2f} s in total at this call site, "
                    f"{d.get('recompiles_here', 1)} recompile(s) here",
                )
            )
        else:
            facts.append(
                ("cost", f"{d.get('recompiles_here', 1)} compilation(s) at this sync point")
            )
        if d.get("storm"):
            facts.append(("warning", "recompilation storm: this call site keeps recompiling"))
        return facts

    def to_text(self, width: int | None = None) -> str:
        width = terminal_width(width)
        lines = [f"{self._kind()} #{self.event.seq}: {self.event.summary}"]
        for name, value in self._facts():  # wrapped, never cut: this is the explanation
            lines += textwrap.wrap(
                str(value),
                width=max(width, 40),
                initial_indent=f"  {name:<18} ",
                subsequent_indent=" " * 21,
                break_on_hyphens=False,
            )
        return "\n".join(lines)

    def to_html(self) -> str:
        rows = "".join(
            f"<tr><td style='padding:2px 8px;color:#6b7280;vertical-align:top'>{esc(n)}</td>"
            f"<td style='padding:2px 8px'>{esc(v)}</td></tr>"
            for n, v in self._facts()
        )
        return (
            f"<div style='border-left:3px solid #dc2626;padding-left:8px'>"
            f"<b>{esc(self._kind())} #{self.event.seq}</b>: "
            f"{esc(self.event.summary)}"
            f"<table style='{_STYLE}'>{rows}</table></div>"
        )
