"""A parity report (:class:`tpu_lab.numerics.parity.ParityReport`) as a table: per module,
the largest difference "tpu" vs CPU of its output and of its own parameters' gradients."""

from __future__ import annotations

from ..numerics.parity import LayerDiff, ParityReport
from .base import View, clip, esc, terminal_width

_NOTE = (
    "max |tpu - cpu| over each module's output and its own parameters' gradients; rel = "
    "relative to the largest CPU value"
)


def _num(x: float | None) -> str:
    if x is None:
        return "-"
    return "0" if x == 0 else f"{x:.2e}"


class ParityView(View):
    """The table of ``report`` (text and HTML from the same rows)."""

    def __init__(self, report: ParityReport) -> None:
        self.report = report

    def _title(self) -> str:
        r = self.report
        where = "the bundled (simulated) device" if r.simulated else "the TPU"
        if r.emulated:
            where += " with TPU numerics emulated"
        verdict = (
            "bitwise equal"
            if r.bitwise
            else f"worst forward {_num(r.worst_forward)}, worst gradient {_num(r.worst_grad)}"
        )
        return f"parity: {where} vs CPU, {len(r.rows)} modules: {verdict}"

    def _cells(self, r: LayerDiff) -> list[str]:
        shape = "x".join(map(str, r.shape)) if r.shape is not None else "-"
        cells = [r.kind, shape, _num(r.forward_max), _num(r.forward_rel)]
        if self.report.backward:
            cells += [_num(r.grad_max), _num(r.grad_rel)]
        return cells

    def _header(self) -> list[str]:
        head = ["module", "type", "output", "fwd max|d|", "fwd rel"]
        return head + (["grad max|d|", "grad rel"] if self.report.backward else [])

    def to_text(self, width: int | None = None) -> str:
        width = terminal_width(width)
        table = [self._header()] + [
            ["  " * r.depth + r.name, *self._cells(r)] for r in self.report.rows
        ]
        widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
        lines = [self._title()]
        for row in table:
            cells = (c.ljust(w) for c, w in zip(row, widths, strict=True))
            lines.append(clip("  ".join(cells).rstrip(), width))
        lines.append(f"differences are {_NOTE}")
        return "\n".join(lines)

    def to_html(self) -> str:
        head = "".join(f"<th>{esc(h)}</th>" for h in self._header())
        body = "".join(
            "<tr>"
            + f"<td style='padding-left:{r.depth}em'>{esc(r.name)}</td>"
            + "".join(f"<td>{esc(c)}</td>" for c in self._cells(r))
            + "</tr>"
            for r in self.report.rows
        )
        return (
            f"<div><b>{esc(self._title())}</b><table><tr>{head}</tr>{body}</table>"
            f"<small>{esc(_NOTE)}</small></div>"
        )
