"""The dashboard's state as a static view: text/plain and text/html for where no widget manager
runs (a terminal, a saved notebook opened without a kernel, nbviewer, GitHub). It draws the rows
the live widget draws (:mod:`._dashboard_rows`)."""

from __future__ import annotations

import textwrap

from ._dashboard_rows import DashboardState, rows
from ._widget_protocol import Gauge, Row
from .base import View, clip, esc, terminal_width
from .palette import KIND_COLORS, TEXT

_FONT = "font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:12px"
_MUTED = "color:#6b7280"


def _wrapped(text: str, width: int, indent: str, more: str | None = None) -> list[str]:
    """``text`` in lines of at most ``width``, broken between words: a figure is never cut."""
    return textwrap.wrap(text, width, initial_indent=indent,
                         subsequent_indent=indent if more is None else more,
                         break_on_hyphens=False, break_long_words=False)


class DashboardView(View):
    """A snapshot of the dashboard (the dict :meth:`Dashboard.state` returns)."""

    def __init__(self, state: DashboardState) -> None:
        self.state = state
        self.rows = rows(state)

    def _header(self) -> str:
        header = self.rows["header"]
        return f"{header['title']} · {header['subtitle']}"

    def to_text(self, width: int | None = None) -> str:
        width = terminal_width(width)
        counters, feed = self.rows["counters"], self.rows["feed"]
        lines = _wrapped(f"tpu_lab dashboard · {self._header()}", width, "", "  ")
        lines.append(f"  eager mode     {self.state['eager_mode']}")
        lines.append(f"  compile cache  hit rate {counters['hit_rate']}")
        lines += _wrapped(counters["note"], width, "                 ")
        lines.append(f"  torch.compile  {counters['compiles']}, {counters['recompiles']}")
        for gauge in self.rows["gauges"]["chips"]:
            bar = ""
            if gauge["meter"]:
                filled = round(gauge["live"] / 10)
                bar = "█" * filled + "░" * (10 - filled) + " "
            lines.append(clip(f"  HBM {gauge['name']:<10} {bar}{gauge['usage']}", width))
        lines.append(f"  events ({feed['shown']})")
        for group in feed["groups"]:
            lines.append(f"  {group['title']} · {group['total']}")
            if group["timing"]:
                lines += _wrapped(group["timing"], width, "    ")
            for row in group["rows"]:  # wrapped, never cut in the middle of a figure
                times = f" {row['times']}" if row["times"] else ""
                line = f"{row['seq']:>5} {row['label']:<11} {row['summary']}{times}"
                lines += _wrapped(f"{line}  {row['where']}".rstrip(), width, "    ",
                                  " " * 22)
        return "\n".join(lines)

    def to_html(self) -> str:
        counters, feed = self.rows["counters"], self.rows["feed"]
        chips = "".join(self._chip_html(gauge) for gauge in self.rows["gauges"]["chips"])
        groups = "".join(
            f"<details{' open' if group['open'] else ''}>"
            f"<summary style='cursor:pointer;font-weight:600'>"
            f"{esc(group['title'])} <span style='{_MUTED};font-weight:400'>"
            f"· {esc(group['total'])}</span>"
            + (f"<div style='{_MUTED};font-weight:400;font-size:smaller'>"
               f"{esc(group['timing'])}</div>" if group["timing"] else "")
            + "</summary>"
            f"<table style='{_FONT};border-collapse:collapse'>"
            + "".join(self._row_html(row) for row in group["rows"])
            + "</table></details>"
            for group in feed["groups"]
        )
        return (
            f"<div style='{_FONT};border:1px solid #e5e7eb;border-radius:6px;padding:8px 10px;"
            "max-width:900px'>"
            f"<div><b>tpu_lab dashboard</b> <span style='{_MUTED}'>· {esc(self._header())} "
            "· a snapshot: the live widget needs a running kernel</span></div>"
            f"<div style='margin-top:4px'>eager mode <b>{esc(self.state['eager_mode'])}</b> · "
            f"compile cache hit rate <b>{esc(counters['hit_rate'])}</b> · "
            f"torch.compile {esc(counters['compiles'])}, {esc(counters['recompiles'])}</div>"
            f"<div style='{_MUTED}'>{esc(counters['note'])}</div>"
            f"<div style='display:flex;flex-wrap:wrap;gap:8px;margin:6px 0'>{chips}</div>"
            f"<div><b>events</b> <span style='{_MUTED}'>({esc(feed['shown'])})</span></div>"
            f"{groups or '<div>(none yet)</div>'}</div>"
        )

    @staticmethod
    def _chip_html(gauge: Gauge) -> str:
        bar = ""
        if gauge["meter"]:
            bar = (
                f"<div style='width:{gauge['live']:.1f}%;height:8px;background:#2563eb;"
                f"border-radius:4px'></div><div style='position:absolute;top:-2px;"
                f"left:{gauge['peak']:.1f}%;width:2px;height:12px;background:#dc2626'></div>"
            )
        opacity = "1" if gauge["driven"] else "0.55"
        return (
            f"<div style='border:1px solid #e5e7eb;border-radius:4px;padding:4px 6px;"
            f"min-width:180px;opacity:{opacity}'>{esc(gauge['name'])}"
            f"<div style='position:relative;height:8px;background:#e5e7eb;border-radius:4px;"
            f"margin:3px 0'>{bar}</div><span style='{_MUTED}'>{esc(gauge['usage'])}</span></div>"
        )

    @staticmethod
    def _row_html(row: Row) -> str:
        color = KIND_COLORS.get(row["kind"], TEXT)
        why = (
            f"<details><summary style='cursor:pointer;{_MUTED}'>why?</summary>"
            f"{row['explanation']}</details>"
            if row["explanation"]
            else ""
        )
        times = f" <b style='{_MUTED}'>{row['times']}</b>" if row["times"] else ""
        return (
            "<tr style='border-top:1px solid #f3f4f6;vertical-align:top'>"
            f"<td style='padding:1px 6px;{_MUTED}'>{row['clock']}</td>"
            f"<td style='padding:1px 6px;color:{color};font-weight:600'>{esc(row['label'])}</td>"
            f"<td style='padding:1px 6px'>{esc(row['summary'])}{times}{why}</td>"
            f"<td style='padding:1px 6px;{_MUTED}'>{esc(row['where'])}</td></tr>"
        )
