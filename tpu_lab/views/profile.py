"""A profile (:class:`tpu_lab.profiler.report.Profile`) as a picture: a timeline of its ops,
sync points, compilations, cache hits/misses and transfers (text, or an inline SVG without
scripts), and the per-op table of the most expensive ops; where the profile has an estimate, an
"estimated TPU" track beside the host timeline (on its own scale: estimated time on an
idealised chip) and the estimate's per-op table (FLOPs, HBM bytes, arithmetic intensity, bound).
"""

from __future__ import annotations

import textwrap

from ..estimate.result import Estimate
from ..profiler.report import LANES, Profile
from ..units import format_bytes
from .base import View, clip, esc, terminal_width
from .estimate import flops_text, seconds_text, times_text

#: The estimated track's name, and the colour of its steps by bound.
ESTIMATED = "est. TPU"
BOUND_COLOURS = {"compute": "#b07aa1", "memory": "#9c755f", "collective": "#edc948",
                 "launch": "#bab0ac"}
_EST_HEAD = ("op", "count", "est. time", "share", "FLOPs", "HBM", "FLOP/B", "bound")


def _estimate_rows(e: Estimate, top: int) -> list[tuple[str, ...]]:
    total = e.seconds or 1.0
    return [(f"{o.name} {o.shapes}".strip(), str(o.count), seconds_text(o.seconds),
             f"{o.seconds / total:.1%}", flops_text(o.flops) if o.flops else "-",
             format_bytes(int(o.hbm_bytes)) if o.hbm_bytes else "-",
             f"{o.intensity:.3g}" if o.intensity is not None else "-", o.bound)
            for o in e.top(top) if o.kind != "launch"]


def _estimate_head(e: Estimate) -> str:
    return f"estimated on {e.idealised_chip} (not a measurement): {times_text(e)}, {e.bound}-bound"

#: The lanes' colours in the SVG timeline.
LANE_COLOURS = {
    "ops": "#4e79a7",
    "sync": "#e15759",
    "compile": "#f28e2b",
    "cache": "#76b7b2",
    "transfer": "#59a14f",
}
_MARK = {"ops": "#", "sync": "S", "compile": "C", "cache": "c", "transfer": "T"}


class ProfileView(View):
    """The timeline of ``profile`` and its ``top`` most expensive ops."""

    def __init__(self, profile: Profile, top: int = 12) -> None:
        self.profile = profile
        self.top = top

    def _lanes(self) -> dict[str, list[tuple[float, float]]]:
        lanes: dict[str, list[tuple[float, float]]] = {lane: [] for lane in LANES}
        lanes["ops"] = [(o.start_us, o.dur_us) for o in self.profile.ops]
        for e in self.profile.events:
            lanes[e.lane].append((e.start_us, e.dur_us))
        return lanes

    def to_text(self, width: int | None = None) -> str:
        width = terminal_width(width)
        span = max(self.profile.total_us, 1.0)
        cols = max(width - 12, 20)
        lines = [clip(self.profile.summary(), width), ""]
        for lane, items in self._lanes().items():
            row = [" "] * cols
            for start, dur in items:
                a = min(int(start / span * cols), cols - 1)
                b = min(max(int((start + dur) / span * cols), a + 1), cols)
                for i in range(max(a, 0), b):
                    row[i] = _MARK[lane]
            lines.append(f"{lane:>9} |{''.join(row)}|")
        lines.append(f"{'':>9}  0{'':{cols - 12}}{self.profile.total_us / 1e3:8.1f} ms")
        e = self.profile.estimate
        if e is not None:
            row = [" "] * cols
            est_span = max(e.seconds * 1e6, 1e-9)
            for n, s in enumerate(self.profile.estimated):
                a = min(int(s.start_us / est_span * cols), cols - 1)
                b = min(max(int((s.start_us + s.dur_us) / est_span * cols), a + 1), cols)
                mark = ("#+" if s.bound == "compute" else "=-")[n % 2]  # steps told apart
                for i in range(a, b):
                    row[i] = mark
            lines.append(f"{ESTIMATED:>9} |{''.join(row)}|")
            lines.append(f"{'':>9}  0{'':{cols - 12}}{seconds_text(e.seconds):>8}")
            lines.append(clip(f"{'':>9}  {ESTIMATED}: estimated time on {e.idealised_chip} (not a "
                              "measurement)", width))
            lines.append(clip(f"{'':>9}  on its own scale; #+ compute-bound, =- memory- or "
                              "launch-bound", width))
        lines.append("")
        lines.append(f"  {'op':<34}{'calls':>7}{'total ms':>11}{'mean µs':>10}{'share':>8}")
        for s in self.profile.table()[: self.top]:
            share = s.total_us / span * 100
            lines.append(clip(f"  {s.name:<34}{s.calls:>7}{s.total_us / 1e3:>11.3f}"
                              f"{s.mean_us:>10.1f}{share:>7.1f}%", width))  # fmt: skip
        rest = len(self.profile.table()) - self.top
        if rest > 0:
            lines.append(f"  ... {rest} more ops")
        for e in self.profile.events:
            if e.lane in ("sync", "compile") or e.kind == "cache_miss":
                where = f"  ({e.where})" if e.where else ""
                lines.append(clip(f"  {e.start_us / 1e3:8.2f} ms  {e.kind:<10} {e.summary}{where}",
                                  width))  # fmt: skip
        if self.profile.estimate is not None:
            lines += ["", *self._estimate_table(width)]
        return "\n".join(lines)

    def _estimate_table(self, width: int) -> list[str]:
        e = self.profile.estimate
        rows = _estimate_rows(e, self.top)
        name = min(max([len(_EST_HEAD[0]), *(len(r[0]) for r in rows)]), max(width - 72, 12))
        fmt = "  {:<{n}} {:>6} {:>10} {:>6} {:>11} {:>10} {:>8}  {}"
        lines = [*textwrap.wrap(_estimate_head(e), width, initial_indent="  ",
                                subsequent_indent="    "),
                 clip(fmt.format(*_EST_HEAD, n=name), width)]
        lines += [clip(fmt.format(clip(r[0], name), *r[1:], n=name), width) for r in rows]
        hidden = len([o for o in e.ops if o.kind != "launch"]) - len(rows)
        if hidden > 0:
            lines.append(f"  ... {hidden} more")
        return lines

    def svg(self, width: int = 760) -> str:
        lane_h, left = 22, 70
        lanes = self._lanes()
        est = self.profile.estimate
        height = lane_h * (len(lanes) + (est is not None)) + 24
        span = max(self.profile.total_us, 1.0)
        scale = (width - left - 10) / span
        out = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' "
               "font-family='sans-serif' font-size='11'>"]  # fmt: skip
        titles = {"ops": [f"{o.name} {o.dur_us:.1f} µs {list(o.shapes)}" for o in self.profile.ops]}
        for lane in LANE_COLOURS:
            titles.setdefault(lane, [])
        for e in self.profile.events:
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
        if est is not None:
            y = len(lanes) * lane_h + 4
            est_scale = (width - left - 10) / max(est.seconds * 1e6, 1e-9)
            out.append(f"<text x='4' y='{y + 14}'>{ESTIMATED}</text>")
            out.append(f"<rect x='{left}' y='{y}' width='{width - left - 10}' height='{lane_h - 4}'"
                       " fill='#f4f4f4'><title>estimated time on its own scale, 0 to "
                       f"{esc(seconds_text(est.seconds))}: {esc(_estimate_head(est))}"
                       "</title></rect>")
            for s in self.profile.estimated:
                out.append(f"<rect x='{left + s.start_us * est_scale:.1f}' y='{y}' "
                           f"width='{max(s.dur_us * est_scale, 1.5):.1f}' height='{lane_h - 4}' "
                           f"fill='{BOUND_COLOURS[s.bound]}'><title>{esc(s.name)} "
                           f"{esc(seconds_text(s.dur_us / 1e6))} estimated, {s.bound}-bound"
                           "</title></rect>")
        y = (len(lanes) + (est is not None)) * lane_h + 18
        out.append(f"<text x='{left}' y='{y}'>0 ms</text>")
        out.append(f"<text x='{width - 10}' y='{y}' text-anchor='end'>"
                   f"{self.profile.total_us / 1e3:.1f} ms</text></svg>")  # fmt: skip
        return "".join(out)

    def to_html(self) -> str:
        total = max(self.profile.total_us, 1)
        rows = "".join(
            f"<tr><td>{esc(s.name)}</td><td>{s.calls}</td><td>{s.total_us / 1e3:.3f}</td>"
            f"<td>{s.mean_us:.1f}</td><td>{s.total_us / total * 100:.1f}%</td></tr>"
            for s in self.profile.table()[: self.top]
        )
        estimated = ""
        e = self.profile.estimate
        if e is not None:
            head = "".join(f"<th>{esc(h)}</th>" for h in _EST_HEAD)
            body = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in r) + "</tr>"
                           for r in _estimate_rows(e, self.top))
            estimated = (f"<b>{esc(_estimate_head(e))}</b> (the {ESTIMATED} track: its own "
                         f"scale, 0 to {esc(seconds_text(e.seconds))})"
                         f"<table><tr>{head}</tr>{body}</table>")
        return (
            f"<div><b>{esc(self.profile.summary())}</b><br>{self.svg()}"
            "<table><tr><th>op</th><th>calls</th><th>total ms</th><th>mean µs</th>"
            f"<th>share</th></tr>{rows}</table>{estimated}</div>"
        )
