"""The dashboard's state as a static view: text/plain and text/html for where no widget manager
runs (a terminal, a saved notebook opened without a kernel, nbviewer, GitHub)."""

from __future__ import annotations

import time

from ..runtime.memory import format_bytes
from .base import View, clip, counted, esc, terminal_width
from .palette import KIND_COLORS, TEXT

_FONT = "font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:12px"
_MUTED = "color:#6b7280"


def _hit_rate(cache: dict) -> str:
    requests = cache.get("requests", 0)
    if not requests:
        return "no DEFER_AND_FUSE graphs yet"
    return f"{cache['hits'] / requests:.0%} ({cache['hits']} of {requests} graphs)"


def _compiles(cache: dict) -> str:
    compiles, recompiles = cache.get("compiles", 0), cache.get("recompiles", 0)
    return (
        f"{compiles} compile{'s' * (compiles != 1)}, "
        f"{recompiles} recompile{'s' * (recompiles != 1)}"
    )


def _usage(chip: dict) -> str:
    if not chip["driven"]:
        return f"{format_bytes(chip['capacity'])}, driven by another process"
    if not chip["measured"]:
        return f"{format_bytes(chip['capacity'])}, usage not reported by this backend"
    return (
        f"{format_bytes(chip['live'])} / {format_bytes(chip['capacity'])}, "
        f"peak {format_bytes(chip['peak'])}"
    )


def _groups(events: list[dict]) -> list[tuple[int | None, list[dict]]]:
    """Events grouped by cell, newest cell first, events in order within a cell."""
    groups: dict[int | None, list[dict]] = {}
    for event in events:
        groups.setdefault(event["cell"], []).append(event)
    return sorted(groups.items(), key=lambda item: item[1][-1]["seq"], reverse=True)


#: Kinds that come by the hundred: one row per kind and place in a cell, with a count.
_ROUTINE = frozenset({"sync", "transfer", "cache_hit"})


def _rows(events: list[dict]) -> list[tuple[dict, int, str]]:
    """``(event, count, summary)`` per row: routine events of one kind and place collapse into
    one row (at their first occurrence); every other event keeps its own row."""
    rows: list[list] = []
    seen: dict[tuple[str, str], list] = {}
    for e in events:
        key = (e["kind"], e["where"])
        if e["kind"] in _ROUTINE and key in seen:
            row = seen[key]
            row[1] += 1
            if row[2] != e["summary"]:
                row[3] = True
            continue
        row = [e, 1, e["summary"], False]
        rows.append(row)
        if e["kind"] in _ROUTINE:
            seen[key] = row
    return [
        (e, n, f"{n} {e['kind']} events, first: {first}" if mixed else first)
        for e, n, first, mixed in rows
    ]


def _notable(events: list[dict]) -> bool:
    return any(e["kind"] not in _ROUTINE for e in events)


def _cell_name(cell: int | None) -> str:
    return f"In [{cell}]" if cell is not None else "outside a cell"


class DashboardView(View):
    """A snapshot of the dashboard (the dict :meth:`Dashboard.state` returns)."""

    def __init__(self, state: dict) -> None:
        self.state = state

    def _header(self) -> str:
        d = self.state["device"]
        shape = ",".join(map(str, d["topology_shape"]))
        return (
            f"{d['device_name']} · {d['topology']} ({shape}), {counted(d['chips'], 'chip')}; "
            f"this process drives {d['devices_in_process']}"
        )

    def to_text(self, width: int | None = None) -> str:
        width = terminal_width(width)
        s = self.state
        lines = [clip(f"tpu_lab dashboard · {self._header()}", width)]
        lines.append(f"  eager mode     {s['eager_mode']}")
        lines.append(f"  compile cache  hit rate {_hit_rate(s['cache'])}")
        lines.append(f"  torch.compile  {_compiles(s['cache'])}")
        for chip in s["chips"]:
            bar = ""
            if chip["driven"] and chip["measured"] and chip["capacity"]:
                filled = round(10 * chip["live"] / chip["capacity"])
                bar = "█" * filled + "░" * (10 - filled) + " "
            lines.append(clip(f"  HBM chip {chip['index']:<5} {bar}{_usage(chip)}", width))
        cells = {c["cell"]: c["total"] for c in s["cells"]}
        lines.append(f"  events ({len(s['events'])} shown of {s['seen']})")
        for cell, events in _groups(s["events"]):
            lines.append(f"  {_cell_name(cell)} · {counted(cells.get(cell, len(events)), 'event')}")
            for e, count, summary in _rows(events):
                head = f"    {e['seq']:>5} {e['kind']:<11} "
                times = f" ×{count}" if count > 1 and not summary[0].isdigit() else ""
                lines.append(clip(f"{head}{summary}{times}  {e['where']}".rstrip(), width))
        return "\n".join(lines)

    def to_html(self) -> str:
        s = self.state
        chips = "".join(self._chip_html(chip) for chip in s["chips"])
        cells = {c["cell"]: c["total"] for c in s["cells"]}
        feed = "".join(
            f"<details{' open' if index == 0 or _notable(events) else ''}>"
            f"<summary style='cursor:pointer;font-weight:600'>"
            f"{esc(_cell_name(cell))} <span style='{_MUTED};font-weight:400'>"
            f"· {counted(cells.get(cell, len(events)), 'event')}</span></summary>"
            f"<table style='{_FONT};border-collapse:collapse'>"
            + "".join(self._event_html(*row) for row in _rows(events))
            + "</table></details>"
            for index, (cell, events) in enumerate(_groups(s["events"]))
        )
        return (
            f"<div style='{_FONT};border:1px solid #e5e7eb;border-radius:6px;padding:8px 10px;"
            "max-width:900px'>"
            f"<div><b>tpu_lab dashboard</b> <span style='{_MUTED}'>· {esc(self._header())} "
            "· a snapshot: the live widget needs a running kernel</span></div>"
            f"<div style='margin-top:4px'>eager mode <b>{esc(s['eager_mode'])}</b> · "
            f"compile cache hit rate <b>{esc(_hit_rate(s['cache']))}</b> · "
            f"torch.compile {esc(_compiles(s['cache']))}</div>"
            f"<div style='display:flex;flex-wrap:wrap;gap:8px;margin:6px 0'>{chips}</div>"
            f"<div><b>events</b> <span style='{_MUTED}'>({len(s['events'])} shown of "
            f"{s['seen']})</span></div>{feed or '<div>(none yet)</div>'}</div>"
        )

    @staticmethod
    def _chip_html(chip: dict) -> str:
        bar = ""
        if chip["driven"] and chip["measured"] and chip["capacity"]:
            fill = 100 * chip["live"] / chip["capacity"]
            peak = 100 * chip["peak"] / chip["capacity"]
            bar = (
                f"<div style='width:{fill:.1f}%;height:8px;background:#2563eb;"
                f"border-radius:4px'></div><div style='position:absolute;top:-2px;left:{peak:.1f}%;"
                f"width:2px;height:12px;background:#dc2626'></div>"
            )
        opacity = "1" if chip["driven"] else "0.55"
        return (
            f"<div style='border:1px solid #e5e7eb;border-radius:4px;padding:4px 6px;"
            f"min-width:180px;opacity:{opacity}'>chip {chip['index']}"
            f"<div style='position:relative;height:8px;background:#e5e7eb;border-radius:4px;"
            f"margin:3px 0'>{bar}</div><span style='{_MUTED}'>{esc(_usage(chip))}</span></div>"
        )

    @staticmethod
    def _event_html(e: dict, count: int = 1, summary: str | None = None) -> str:
        color = KIND_COLORS.get(e["kind"], TEXT)
        why = (
            f"<details><summary style='cursor:pointer;{_MUTED}'>why?</summary>"
            f"{e['explanation']}</details>"
            if e["explanation"]
            else ""
        )
        clock = time.strftime("%H:%M:%S", time.localtime(e["time"]))
        summary = summary or e["summary"]
        times = (
            f" <b style='{_MUTED}'>×{count}</b>" if count > 1 and not summary[0].isdigit() else ""
        )
        return (
            "<tr style='border-top:1px solid #f3f4f6;vertical-align:top'>"
            f"<td style='padding:1px 6px;{_MUTED}'>{clock}</td>"
            f"<td style='padding:1px 6px;color:{color};font-weight:600'>{esc(e['kind'])}</td>"
            f"<td style='padding:1px 6px'>{esc(summary or e['summary'])}{times}{why}</td>"
            f"<td style='padding:1px 6px;{_MUTED}'>{esc(e['where'])}</td></tr>"
        )
