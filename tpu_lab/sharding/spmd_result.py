"""What an SPMD cell returns (:class:`SpmdResult`) and how a failed rank is described."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from ..views.base import View, clip, esc, terminal_width


@dataclass(frozen=True)
class RankFailure:
    rank: int
    pid: int
    reason: str  # "raised" | "died" | "hung"
    traceback: str

    def describe(self) -> str:
        head = {
            "raised": f"rank {self.rank} (pid {self.pid}) raised",
            "died": f"rank {self.rank} (pid {self.pid}) died",
            "hung": f"rank {self.rank} (pid {self.pid}) did not finish",
        }[self.reason]
        return f"{head}:\n{self.traceback}".rstrip()


@dataclass(frozen=True)
class ShardedValue:
    """A DTensor (or a module holding DTensors) the cell bound, gathered from every rank."""

    name: str
    kind: str  # "tensor" | "module"
    description: str
    local_bytes: tuple[int, ...]
    info: object | None = None  # tpu_lab.sharding.ShardingInfo of a tensor


@dataclass(frozen=True, repr=False)  # repr is the View's text
class SpmdResult(View):
    """One SPMD cell: rank 0's output and result, gathered sharding, every rank's events."""

    topology: str
    ranks: int
    seconds: float
    stdout: str
    stderr: str
    result: dict[str, str] | None
    sharding: tuple[ShardedValue, ...]
    events: tuple[tuple[tuple[str, str], ...], ...] = field(default=())

    def event_counts(self, rank: int) -> dict[str, int]:
        return dict(Counter(kind for kind, _ in self.events[rank]))

    def _event_lines(self) -> list[str]:
        lines = []
        for rank, _ in enumerate(self.events):
            counts = self.event_counts(rank)
            text = ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) or "none"
            lines.append(f"rank {rank}: {text}")
        return lines

    def _sharding_rows(self) -> list[tuple[str, str, str]]:
        from ..device import format_bytes

        return [
            (v.name, v.description, " / ".join(format_bytes(b) for b in v.local_bytes))
            for v in self.sharding
        ]

    def to_text(self, width: int | None = None) -> str:
        width = terminal_width(width)
        out = [
            clip(f"SPMD cell on {self.ranks} ranks ({self.topology}), {self.seconds:.2f} s", width)
        ]
        if self.stdout:
            out += ["rank 0 output:", self.stdout.rstrip("\n")]
        if self.stderr:
            out += ["rank 0 stderr:", self.stderr.rstrip("\n")]
        if self.result is not None:
            out += ["result (rank 0):", self.result.get("text/plain", "")]
        rows = self._sharding_rows()
        if rows:
            out.append("sharding (bytes on each rank):")
            out += [clip(f"  {n}  {d}  [{b}]", width) for n, d, b in rows]
        out.append("events:")
        out += [clip(f"  {line}", width) for line in self._event_lines()]
        return "\n".join(out)

    def to_html(self) -> str:
        parts = [
            f"<div class='tpu-lab-spmd'><b>SPMD cell on {self.ranks} ranks "
            f"({esc(self.topology)})</b>, {self.seconds:.2f} s"
        ]
        if self.stdout:
            parts.append(f"<div>rank 0 output</div><pre>{esc(self.stdout)}</pre>")
        if self.stderr:
            parts.append(f"<div>rank 0 stderr</div><pre>{esc(self.stderr)}</pre>")
        if self.result is not None:
            html = self.result.get("text/html")
            body = html if html else f"<pre>{esc(self.result.get('text/plain', ''))}</pre>"
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
        items = "".join(f"<li>{esc(line)}</li>" for line in self._event_lines())
        parts.append(f"<div>events</div><ul>{items}</ul></div>")
        return "".join(parts)


def gather(per_rank: list[dict]) -> tuple[ShardedValue, ...]:
    values = []
    for name, first in per_rank[0]["sharding"].items():
        local = tuple(r["sharding"].get(name, {}).get("local_bytes", 0) for r in per_rank)
        if first["kind"] == "tensor":
            shape = "x".join(map(str, first["global_shape"]))
            desc = (
                f"{first['dtype']}[{shape}] on mesh {first['mesh_shape']} "
                f"{', '.join(first['placements'])}"
            )
            values.append(ShardedValue(name, "tensor", desc, local, first["info"]))
        else:
            desc = f"{first['class']}: {first['sharded']} of {first['tensors']} tensors sharded"
            values.append(ShardedValue(name, "module", desc, local))
    return tuple(values)


def failure_message(failures: list[RankFailure], world: int) -> str:
    ranks = ", ".join(str(f.rank) for f in failures)
    broken = any(f.reason in ("died", "hung") for f in failures)
    fix = (
        "\nThe cluster must be restarted: %tpu cluster restart (or cluster.restart())."
        if broken
        else ""
    )
    body = "\n\n".join(f.describe() for f in failures)
    return f"The cell failed on {len(failures)} of {world} ranks ({ranks}).{fix}\n\n{body}"
