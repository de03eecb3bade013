"""``%tpu cluster connect``: SPMD cells on an ipyparallel cluster that tpu_lab did not start.

On a pod slice the engines run on every worker, started by ipyparallel's own launchers (SSH,
MPI, Slurm) or by ``gcloud compute tpus tpu-vm ssh --worker=all --command "ipengine ..."``;
they may run on several machines. :class:`ConnectedCluster` attaches to such a cluster through
its connection file, asks each engine which host it is on and how many devices it drives
(each must drive one chip, and a host may run no more engines than it has chips), numbers the
ranks host by host (hosts in ``TPU_WORKER_ID`` order where workers have one, else by name),
serves the rendezvous store from rank 0's engine on its host's address and forms the
``tpu_dist`` process group over every engine. ``stop()`` leaves the group and detaches: the
engines belong to whoever started them and keep running. An engine that dies is seen when the
controller unregisters it (its heartbeat stops).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time

from ..errors import SpmdError
from . import _engine
from ._client import client
from .cluster import COLLECTIVE_TIMEOUT_S, Cluster, Rank, adopt


class ConnectedCluster(Cluster):
    """An existing ipyparallel cluster (``profile``, ``cluster_id`` or ``url_file`` say which,
    as for ``ipyparallel.Client``); ``topology`` defaults to the one its engines were given,
    else the slice with as many devices and hosts."""

    owns_engines = False

    def __init__(
        self,
        profile: str | None = None,
        cluster_id: str | None = None,
        url_file: str | None = None,
        topology: str | None = None,
        *,
        collective_timeout_s: float = COLLECTIVE_TIMEOUT_S,
    ) -> None:
        super().__init__("v6e-1", collective_timeout_s=collective_timeout_s)
        self._where_from = {"profile": profile, "cluster_id": cluster_id, "url_file": url_file}
        self._asked_topology = topology

    def start(self, timeout_s: float = 120.0) -> ConnectedCluster:
        if self.state != "stopped":
            raise SpmdError(f"The cluster is already {self.state}; stop() it first.")
        started = time.perf_counter()
        self.state = "starting"
        self.failures = ()
        given = {k: v for k, v in self._where_from.items() if v}
        where = {k: v for k, v in given.items() if k != "url_file"}
        try:  # ipyparallel takes the connection file as its first argument
            self._client = client(given.get("url_file"), **where, timeout=timeout_s)
        except (OSError, TimeoutError) as exc:
            self.state = "stopped"
            raise SpmdError(
                f"Cannot connect to the ipyparallel cluster ({given or 'default profile'}): "
                f"{exc}. Start it first (ipcluster start, or ipcontroller and ipengine on each "
                "host) and pass its --profile, --cluster-id or --url-file."
            ) from exc
        try:
            self._attach(timeout_s)
        except BaseException:
            self._teardown()
            raise
        self.state = "ready"
        self.ready_seconds = time.perf_counter() - started
        return self

    def _attach(self, timeout_s: float) -> None:
        from ..device.launch_env import topology_for
        from ..hardware.topology import parse_topology

        client = self._client
        ids = sorted(client.ids)
        if not ids:
            raise SpmdError(
                "The ipyparallel cluster has no engines; start one engine per chip on each host "
                "(ipcluster engines -n 4, or ipengine per chip) and connect again."
            )
        controller = client._config["interface"].split("://")[1]
        if controller in ("*", "0.0.0.0"):
            controller = client._config.get("location") or "127.0.0.1"
        infos = client[ids].apply_sync(_engine.describe, controller)
        engines = sorted(
            zip(ids, infos, strict=True), key=lambda e: (_host_order(e[1]), e[1]["host"], e[0])
        )
        many = [f"engine {eid} on {i['host']} drives {i['devices']} devices"
                for eid, i in engines if i["devices"] != 1]  # fmt: skip
        if many:
            raise SpmdError(
                "Each engine must drive one chip (TorchTPU: one process per chip), but "
                + "; ".join(many)
                + ". Start one engine per chip, each bound to its own chip."
            )
        hosts = list(dict.fromkeys(i["host"] for _, i in engines))
        name = self._asked_topology or engines[0][1]["topology"]
        if name is None or parse_topology(name).devices != len(engines):
            name = topology_for(len(engines), hosts=len(hosts))
        self.topology = parse_topology(name)
        pod = self.topology.slice
        per_host = {h: sum(1 for _, i in engines if i["host"] == h) for h in hosts}
        if pod.hosts != len(hosts) or any(n != pod.devices_per_host for n in per_host.values()):
            counts = ", ".join(f"{h}: {n}" for h, n in per_host.items())
            raise SpmdError(
                f"{self.topology.name} has {pod.hosts} hosts of {pod.devices_per_host} chips, but "
                f"the cluster's engines are {counts}. Run {pod.devices_per_host} engines on each "
                "host, or name the topology that matches them."
            )
        world = len(engines)
        folder = tempfile.mkdtemp(prefix="tpu-lab-connect-")
        self._folder = folder
        first_id, first = engines[0]
        port = client[first_id].apply_sync(
            _engine.open_store, first["address"], world, self.collective_timeout_s
        )
        per = pod.devices_per_host
        replies = [
            client[eid].apply_async(
                _engine.setup, world, (first["address"], port), self.collective_timeout_s,
                folder, rank, info["address"], (rank // per, rank % per, per),
            )
            for rank, (eid, info) in enumerate(engines)
        ]  # fmt: skip
        done = [r.get(timeout=timeout_s) for r in replies]
        self.ranks = tuple(
            Rank(rank, eid, d["pid"], info["host"])
            for rank, ((eid, info), d) in enumerate(zip(engines, done, strict=True))
        )
        self.backend = done[0]["backend"]

    def processes(self) -> list:
        """None: the engines and the controller are their owner's."""
        return []

    def _rank_alive(self, rank: Rank) -> bool:
        return self._client is not None and rank.engine_id in self._client.ids

    def _exit_text(self, rank: Rank) -> str:
        return "its engine unregistered from the controller (its heartbeat stopped)"

    def _teardown(self) -> None:
        if self._client is not None:
            live = [r.engine_id for r in self.ranks if r.engine_id in self._client.ids]
            with contextlib.suppress(Exception):  # a broken engine must not stop the detach
                if live:
                    self._client[live].apply_sync(_engine.leave)
            with contextlib.suppress(Exception):
                self._client.close()
        if self._folder is not None and os.path.isdir(self._folder):
            import shutil

            shutil.rmtree(self._folder, ignore_errors=True)
        self._client = None
        self.ranks = ()
        self.backend = None
        self.state = "stopped"


def _host_order(info: dict) -> int:
    worker = info.get("worker")
    return int(worker) if worker is not None and worker.isdigit() else 1 << 30


def connect(
    profile: str | None = None,
    cluster_id: str | None = None,
    url_file: str | None = None,
    topology: str | None = None,
) -> Cluster:
    """Attach to an ipyparallel cluster that its own launchers started (engines on one machine
    or several) and form the process group over it; it becomes the current cluster of
    :mod:`.cluster` (refused while another is in use)."""
    return adopt(lambda: ConnectedCluster(profile, cluster_id, url_file, topology))
