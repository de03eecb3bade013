"""A profile (:class:`tpu_lab.profiler.report.Profile`) as a picture: a timeline of its ops,
sync points, compilations, cache hits/misses and transfers (text, or an inline SVG without
scripts), and the per-op table of the most expensive ops."""

from __future__ import annotations

from ..profiler.report import LANES, Profile
from .base import View, clip, esc, terminal_width

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
        return "\n".join(lines)

    def svg(self, width: int = 760) -> str:
        lane_h, left = 22, 70
        lanes = self._lanes()
        height = lane_h * len(lanes) + 24
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
        y = len(lanes) * lane_h + 18
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
        return (
            f"<div><b>{esc(self.profile.summary())}</b><br>{self.svg()}"
            "<table><tr><th>op</th><th>calls</th><th>total ms</th><th>mean µs</th>"
            f"<th>share</th></tr>{rows}</table></div>"
        )
