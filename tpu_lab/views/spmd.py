"""An SPMD cell's result (:class:`tpu_lab.launch.spmd_result.SpmdResult`): rank 0's output
and result, the sharding of the DTensors the cell bound (bytes on each rank, and which mesh
dimensions' collectives cross a host boundary), HBM per chip host by host, every rank's
events."""

from __future__ import annotations

from ..launch.spmd_result import SpmdResult
from ..units import format_bytes
from .base import View, clip, esc, terminal_width


class SpmdResultView(View):
    def __init__(self, cell: SpmdResult) -> None:
        self.cell = cell

    def _event_lines(self) -> list[str]:
        lines = []
        for rank, _ in enumerate(self.cell.events):
            counts = self.cell.event_counts(rank)
            text = ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) or "none"
            lines.append(f"rank {rank}: {text}")
        return lines

    def _sharding_rows(self) -> list[tuple[str, str, str]]:
        return [
            (v.name, v.description + self._crossing(v),
             " / ".join(format_bytes(b) for b in v.local_bytes))
            for v in self.cell.sharding
        ]  # fmt: skip

    def _crossing(self, value) -> str:
        """``; dp: across hosts, tp: within each host`` for a tensor on a mesh over several
        hosts."""
        info = value.info
        if info is None or len(self.cell.by_host()) < 2:
            return ""
        crosses = self.cell.crossing(tuple(info.mesh_shape))
        if not crosses:
            return ""
        names = info.mesh_axis_names or tuple(f"dim {d}" for d in range(len(crosses)))
        return "; " + ", ".join(
            f"{name}: {'across hosts' if c else 'within each host'}"
            for name, c in zip(names, crosses, strict=True)
        )

    def _hbm_lines(self) -> list[str]:
        c = self.cell
        if not c.hbm:
            return []
        capacity = c.hbm[0][2]
        lines = [f"HBM per chip, host by host (live, of {format_bytes(capacity)}):"]
        for host, ranks in c.by_host().items():
            used = ", ".join(f"{r}: {format_bytes(c.hbm[r][0])}" for r in ranks)
            lines.append(f"  {host}: {used}")
        return lines

    def to_text(self, width: int | None = None) -> str:
        width = terminal_width(width)
        c = self.cell
        out = [
            clip(f"SPMD cell on {c.ranks} ranks ({c.topology}), {c.seconds:.2f} s", width)
        ]
        if c.stdout:
            out += ["rank 0 output:", c.stdout.rstrip("\n")]
        if c.stderr:
            out += ["rank 0 stderr:", c.stderr.rstrip("\n")]
        if c.result is not None:
            out += ["result (rank 0):", c.result.get("text/plain", "")]
        rows = self._sharding_rows()
        if rows:
            out.append("sharding (bytes on each rank):")
            out += [clip(f"  {n}  {d}  [{b}]", width) for n, d, b in rows]
        out += [clip(line, width) for line in self._hbm_lines()]
        out.append("events:")
        out += [clip(f"  {line}", width) for line in self._event_lines()]
        return "\n".join(out)

    def to_html(self) -> str:
        c = self.cell
        parts = [
            f"<div class='tpu-lab-spmd'><b>SPMD cell on {c.ranks} ranks "
            f"({esc(c.topology)})</b>, {c.seconds:.2f} s"
        ]
        if c.stdout:
            parts.append(f"<div>rank 0 output</div><pre>{esc(c.stdout)}</pre>")
        if c.stderr:
            parts.append(f"<div>rank 0 stderr</div><pre>{esc(c.stderr)}</pre>")
        if c.result is not None:
            html = c.result.get("text/html")
            body = html if html else f"<pre>{esc(c.result.get('text/plain', ''))}</pre>"
            parts.append(f"<div>result (rank 0)</div>{body}")
        rows = self._sharding_rows()
        if rows:
            cells = "".join(
                f"<tr><td><code>{esc(n)}</code></td><td>{esc(d)}</td><td>{esc(b)}</td></tr>"
                for n, d, b in rows
            )
            parts.append(
                "<table><tr><th>name</th><th>layout</th><th>bytes on each rank</th></tr>"
                f"{cells}</table>"
            )
        hbm = self._hbm_lines()
        if hbm:
            parts.append(f"<div>{esc(hbm[0])}</div><ul>"
                         + "".join(f"<li>{esc(line.strip())}</li>" for line in hbm[1:]) + "</ul>")
        items = "".join(f"<li>{esc(line)}</li>" for line in self._event_lines())
        parts.append(f"<div>events</div><ul>{items}</ul></div>")
        return "".join(parts)
