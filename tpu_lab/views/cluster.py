"""The cluster of one process per chip (:class:`tpu_lab.launch.cluster.ClusterState`): its
topology and state, then its hosts and each rank's pid and state, host by host."""

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

    def _host_of(self) -> dict[int, str]:
        return {rank: host for host, ranks in self.state.hosts for rank in ranks}

    def _hosts_line(self) -> str:
        hosts = self.state.hosts
        ranks = lambda r: f"{r[0]}-{r[-1]}" if len(r) > 2 else ", ".join(map(str, r))  # noqa: E731
        return f"{len(hosts)} host{'s' if len(hosts) != 1 else ''}: " + "; ".join(
            f"{host} (ranks {ranks(r)})" for host, r in hosts
        )

    def to_text(self, width: int | None = None) -> str:
        width = terminal_width(width)
        lines = [clip(self._title(), width)]
        if self.state.ranks:
            lines.append(f"backend {self.state.backend}, process group 'tpu_dist'")
            lines.append(clip(self._hosts_line(), width))
            host = self._host_of()
            name = max((len(h) for h in host.values()), default=4)
            lines.append(f"rank  {'host':<{name}}  pid      state")
            lines += [
                f"{r:<5} {host.get(r, ''):<{name}}  {p:<8} {s}" for r, p, s in self.state.ranks
            ]
        return "\n".join(lines)

    def to_html(self) -> str:
        host = self._host_of()
        rows = "".join(
            f"<tr><td>{r}</td><td>{esc(host.get(r, ''))}</td><td>{p}</td><td>{esc(s)}</td></tr>"
            for r, p, s in self.state.ranks
        )
        head = "<tr><th>rank</th><th>host</th><th>pid</th><th>state</th></tr>"
        body = f"<div>{esc(self._hosts_line())}</div><table>{head}{rows}</table>" if rows else ""
        return f"<div class='tpu-lab-cluster'><b>{esc(self._title())}</b>{body}</div>"


def cluster_view(cluster: Cluster) -> ClusterView:
    """The picture of a running (or stopped) cluster: its state now."""
    return ClusterView(cluster.state_now())
