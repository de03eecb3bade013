"""The cluster of one process per chip (:class:`tpu_lab.launch.cluster.ClusterState`): its
topology and state, then each rank's pid and state."""

from __future__ import annotations

from ..launch.cluster import Cluster, ClusterState
from .base import View, clip, esc, terminal_width


class ClusterView(View):
    def __init__(self, state: ClusterState) -> None:
        self.state = state

    def _title(self) -> str:
        s = self.state
        ready = f", ready in {s.ready_seconds:.1f} s" if s.ready_seconds is not None else ""
        return f"tpu_lab cluster {s.topology}: {s.state}{ready}"

    def to_text(self, width: int | None = None) -> str:
        width = terminal_width(width)
        lines = [clip(self._title(), width)]
        if self.state.ranks:
            lines.append(f"backend {self.state.backend}, process group 'tpu_dist'")
            lines.append("rank  pid      state")
            lines += [f"{r:<5} {p:<8} {s}" for r, p, s in self.state.ranks]
        return "\n".join(lines)

    def to_html(self) -> str:
        rows = "".join(
            f"<tr><td>{r}</td><td>{p}</td><td>{esc(s)}</td></tr>" for r, p, s in self.state.ranks
        )
        table = f"<table><tr><th>rank</th><th>pid</th><th>state</th></tr>{rows}</table>"
        body = table if rows else ""
        return f"<div class='tpu-lab-cluster'><b>{esc(self._title())}</b>{body}</div>"


def cluster_view(cluster: Cluster) -> ClusterView:
    """The picture of a running (or stopped) cluster: its state now."""
    return ClusterView(cluster.state_now())
