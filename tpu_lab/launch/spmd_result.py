"""What an SPMD cell returns (:class:`SpmdResult`; its picture:
:class:`tpu_lab.views.spmd.SpmdResultView`) and how a failed rank is described."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from .._drawn import Drawn


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


@dataclass(frozen=True)
class SpmdResult(Drawn):
    """One SPMD cell: rank 0's output and result, gathered sharding, every rank's events."""

    topology: str
    ranks: int
    seconds: float
    stdout: str
    stderr: str
    result: dict[str, str] | None
    sharding: tuple[ShardedValue, ...]
    events: tuple[tuple[tuple[str, str], ...], ...] = field(default=())
    hosts: tuple[str, ...] = ()  # each rank's host
    hbm: tuple[tuple[int, int, int], ...] = ()  # each rank's chip: live, peak, capacity bytes

    def event_counts(self, rank: int) -> dict[str, int]:
        return dict(Counter(kind for kind, _ in self.events[rank]))

    def by_host(self) -> dict[str, tuple[int, ...]]:
        """Each host and its ranks, in rank order."""
        out: dict[str, list[int]] = {}
        for rank, host in enumerate(self.hosts):
            out.setdefault(host, []).append(rank)
        return {host: tuple(ranks) for host, ranks in out.items()}

    def crossing(self, mesh_shape: tuple[int, ...]) -> tuple[bool, ...]:
        """For each dimension of a mesh over every rank (ranks laid out row-major, as
        ``init_device_mesh`` lays them), whether its collectives cross a host boundary: some
        group along it has ranks on two hosts. Empty when the mesh is not over every rank."""
        import numpy as np

        if not self.hosts or int(np.prod(mesh_shape)) != len(self.hosts):
            return ()
        hosts = np.array([list(dict.fromkeys(self.hosts)).index(h) for h in self.hosts])
        grid = hosts.reshape(mesh_shape)
        return tuple(bool((np.ptp(grid, axis=d) > 0).any()) for d in range(len(mesh_shape)))


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


def rank_list(ranks: list[int]) -> str:
    """``0-7``, ``0-2, 5``."""
    spans: list[list[int]] = []
    for r in sorted(ranks):
        if spans and r == spans[-1][1] + 1:
            spans[-1][1] = r
        else:
            spans.append([r, r])
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in spans)


def failure_message(failures: list[RankFailure], world: int, advice: str = "") -> str:
    """Which ranks failed and how; ranks that failed the same way (the same traceback) share
    one traceback. ``advice``: what tpu_lab found out about the failure (a paragraph)."""
    broken = any(f.reason in ("died", "hung") for f in failures)
    fix = (
        "\nThe cluster must be restarted: %tpu cluster restart (or cluster.restart())."
        if broken
        else ""
    )
    groups: dict[tuple[str, str], list[RankFailure]] = {}
    for f in failures:
        groups.setdefault((f.reason, f.traceback), []).append(f)
    parts = [advice]
    for (reason, traceback), same in groups.items():
        if len(same) == 1:
            parts.append(same[0].describe())
        else:
            ranks = rank_list([f.rank for f in same])
            parts.append(f"ranks {ranks} {reason} the same way:\n{traceback}".rstrip())
    ranks = rank_list([f.rank for f in failures])
    head = f"The cell failed on {len(failures)} of {world} ranks ({ranks})"
    if len(groups) == 1 and len(failures) > 1:
        head += ", the same way on each"
    body = "\n\n".join(p for p in parts if p)
    return f"{head}.{fix}\n\n{body}"


def lost_hosts_message(
    lost: dict[str, tuple[int, ...]], failures: list[RankFailure], others: int, topology: str
) -> str:
    """A host whose ranks all died: which host, which ranks and how each ended; the other
    ``others`` hosts were stopped."""
    how = {f.rank: f for f in failures}
    parts = []
    for host, ranks in lost.items():
        listed = ", ".join(map(str, ranks))
        lines = [f"Host {host} was lost: all of its ranks died ({listed})."]
        lines += [f"  rank {r} (pid {how[r].pid}): {how[r].traceback}" for r in ranks]
        parts.append("\n".join(lines))
    plural = "s were" if others != 1 else " was"
    return (
        "\n".join(parts)
        + f"\nThe other {others} host{plural} stopped; no process of the cluster is left. "
        f"Start it again: %tpu cluster start {topology}."
    )
