"""SPMD cells on one process per chip, as TorchTPU runs multi-chip work.

``start("v6e-4")`` launches an ipyparallel controller and one engine per chip, all bound to
127.0.0.1; each engine is one rank of a ``torch.distributed`` process group under TorchTPU's
backend name ``"tpu_dist"`` (gloo on the bundled device, TorchTPU's own on a TPU VM) and drives
its own chip, ``tpu:0``. The engines are forked from one process that imported torch once
(:mod:`.forkserver`). A pod slice (``start("v6e-16")``: 4 hosts of 4 chips) is simulated on
this machine: each host's engines start with the environment a worker of that slice has
(:func:`~tpu_lab.device.launch_env.host_environment`), ranks numbered host by host; a host
whose ranks all die is reported as lost, and the other hosts are stopped.

``run_cell(source)`` runs a cell on every rank and returns an :class:`SpmdResult`: rank 0's
output and result, the sharding of the DTensors the cell bound, and the events of every rank.
A rank that raises, dies or hangs is reported with :class:`~tpu_lab.errors.SpmdError`;
``restart()`` brings up a fresh cluster, whose ranks first run the imports of the SPMD cells run
before (a later cell may use what an earlier one imported); ``stop()`` (and the interpreter's
exit) leaves no process behind. Ranks that failed the same way share one traceback in the
error; a cell that failed on every rank after binding a model whose attention heads do not
divide over the ranks gets the planner's message. :meth:`Cluster.state_now` is what the
cluster looks like (its picture: :class:`tpu_lab.views.cluster.ClusterView`).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from .. import _install
from .._drawn import Drawn
from ..errors import SpmdError
from . import _engine
from ._client import client
from ._launch import PARENT_ENV
from .spmd_result import RankFailure, SpmdResult, failure_message, gather, lost_hosts_message

#: Internal: marks every process of one ``%tpu cluster`` (used to find and stop them).
CLUSTER_ENV = "TPU_LAB_CLUSTER"
#: Seconds a collective may wait for the other ranks before gloo gives up.
COLLECTIVE_TIMEOUT_S = 120.0
#: Seconds the other ranks get to finish after one rank failed.
GRACE_S = 5.0
#: Seconds to wait, once a rank is found dead, for others dying with it (a lost host).
SETTLE_S = 1.0
#: Seconds a rank that did not finish gets to write where it is.
STACK_S = 3.0
#: Frames shown of a rank that did not finish (the most recent ones).
STACK_FRAMES = 16
#: Seconds rank 0's printed output and the cell's value get to arrive after its reply (they
#: travel on another channel, and under load can come later).
OUTPUT_S = 10.0

_lock = threading.RLock()
_current: Cluster | None = None
#: The import statements of the SPMD cells run so far, in order: a cluster started later runs
#: them on its ranks first (its processes are new; the notebook's session is not).
_session_imports: dict[str, None] = {}
_NAME_ERROR = re.compile(r"NameError: name '(\w+)' is not defined")


def imports_of(source: str) -> list[str]:
    """The top-level import statements of a cell, as source ([] if it is not plain Python)."""
    import ast

    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    return [ast.unparse(node) for node in tree.body if isinstance(node, (ast.Import,
                                                                           ast.ImportFrom))]


@dataclass(frozen=True)
class Rank:
    rank: int
    engine_id: int
    pid: int
    host: str = "localhost"


@dataclass(frozen=True)
class ClusterState(Drawn):
    """A cluster at one moment: its state ("stopped", "starting", "ready", "broken"), the
    backend its ranks run, and each rank's pid and state ("running", "exited", or how it
    failed: "raised", "died", "hung")."""

    topology: str
    state: str
    ready_seconds: float | None
    backend: str | None
    ranks: tuple[tuple[int, int, str], ...]
    hosts: tuple[tuple[str, tuple[int, ...]], ...] = ()  # (host, its ranks), in rank order


class Cluster:
    """An ipyparallel controller and one engine per chip of ``topology``, on 127.0.0.1."""

    #: Whether the cluster started its engines (and so may signal and stop them).
    owns_engines = True

    def __init__(self, topology: str = "v6e-4", *, collective_timeout_s=COLLECTIVE_TIMEOUT_S):
        from ..hardware.topology import parse_topology

        self.topology = parse_topology(topology)
        self.collective_timeout_s = float(collective_timeout_s)
        self.state = "stopped"
        self.ranks: tuple[Rank, ...] = ()
        self.failures: tuple[RankFailure, ...] = ()
        self.ready_seconds: float | None = None
        self.backend: str | None = None
        self._ipp = None
        self._client = None
        self._forks = None
        self._folder: str | None = None
        self._id: str | None = None

    @property
    def world_size(self) -> int:
        return self.topology.devices

    # -- life cycle ------------------------------------------------------------------------

    def start(self, timeout_s: float = 120.0) -> Cluster:
        try:
            import ipyparallel as ipp
        except ImportError as exc:
            raise SpmdError(
                f"The cluster needs ipyparallel: {_install.hint('cluster')}"
            ) from exc
        if self.state != "stopped":
            raise SpmdError(f"The cluster is already {self.state}; stop() or restart() it.")
        started = time.perf_counter()
        self.state = "starting"
        self.failures = ()
        self._folder = tempfile.mkdtemp(prefix="tpu-lab-cluster-")
        self._id = os.path.basename(self._folder)
        from ..device.launch_env import host_environment
        from ..runtime import backend
        from .forkserver import ForkServer

        if not backend().simulated:  # TorchTPU's per-process launch variables, as torchrun's
            from .torchrun import prepare_launch

            prepare_launch(self.world_size)
        env = {
            "TPU_LAB_TOPOLOGY": self.topology.name,
            CLUSTER_ENV: self._id,
            PARENT_ENV: str(os.getpid()),
        }
        self._forks = ForkServer(env)  # imports torch while the controller starts
        self._ipp = cluster = ipp.Cluster(
            n=0,
            controller_ip="127.0.0.1",
            controller_args=["--usethreads", "--HeartMonitor.period=500"],
            profile_dir=self._folder,
            load_profile=False,
            shutdown_atexit=False,
            log_level=40,
        )
        launch = [sys.executable, str(Path(_engine.__file__).with_name("_launch.py"))]
        config = cluster.config
        config.LocalControllerLauncher.controller_cmd = [*launch, "ipyparallel.controller"]
        config.LocalControllerLauncher.environment = env
        try:
            cluster.start_controller_sync()
            pod = self.topology.slice
            hosts = [host_environment(self.topology.name, h) for h in range(pod.hosts)]
            logs = os.path.join(self._folder, "log")
            os.makedirs(logs, exist_ok=True)
            for rank in range(self.world_size):
                host = pod.host_of(rank)
                local = rank - pod.ranks_of(host)[0]
                rank_env = {
                    **hosts[host],
                    "RANK": str(rank),
                    "LOCAL_RANK": str(local),
                    "GROUP_RANK": str(host),
                    "WORLD_SIZE": str(self.world_size),
                    "LOCAL_WORLD_SIZE": str(pod.devices_per_host),
                    "TPU_VISIBLE_CHIPS": str(local),
                    "IPP_CLUSTER_ID": cluster.cluster_id,
                    "IPP_PROFILE_DIR": self._folder,
                }
                self._forks.fork(
                    "ipyparallel.engine",
                    ["--IPEngine.enable_nanny=False", "--HistoryManager.enabled=False"],
                    rank_env,
                    os.path.join(logs, f"engine-{rank}.log"),
                )
            self._client = _connect(cluster, timeout_s)
            self._client.wait_for_engines(self.world_size, timeout=timeout_s, interactive=False)
            ids = sorted(self._client.ids)[: self.world_size]
            store = os.path.join(self._folder, "store")
            replies = [
                self._client[eid].apply_async(
                    _engine.setup, self.world_size, store, self.collective_timeout_s,
                    self._folder,
                )
                for eid in ids
            ]  # fmt: skip
            infos = [r.get(timeout=timeout_s) for r in replies]
        except BaseException as exc:
            self._teardown()
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            raise SpmdError(f"The {self.topology.name} cluster did not start: {exc}") from exc
        self.ranks = tuple(
            sorted(
                (Rank(i["rank"], eid, i["pid"], i["host"]) for i, eid in zip(infos, ids,
                                                                            strict=True)),
                key=lambda r: r.rank,
            )
        )  # fmt: skip
        self.backend = infos[0]["backend"]
        if _session_imports:  # what earlier cells imported, so that later cells run as before
            with contextlib.suppress(Exception):  # a failed import shows in the cell that needs it
                self._client[ids].execute("\n".join(_session_imports), block=True)
        self.state = "ready"
        self.ready_seconds = time.perf_counter() - started
        return self

    def stop(self) -> None:
        """Stop the controller and every engine; leaves no process behind."""
        self._teardown()

    def restart(self) -> Cluster:
        self.stop()
        return self.start()

    def processes(self) -> list:
        """Every live process of this cluster (controller, engines, their children)."""
        import psutil

        if self._id is None:
            return []
        found = []
        for proc in psutil.process_iter():
            try:
                if proc.environ().get(CLUSTER_ENV) == self._id and proc.status() != "zombie":
                    found.append(proc)
            except (psutil.Error, OSError):
                continue
        return found

    def _teardown(self) -> None:
        import psutil

        if self._client is not None:
            # a broken connection must not stop the teardown
            with contextlib.suppress(Exception):
                self._client.close()
        procs = self.processes()
        for proc in procs:
            try:
                proc.send_signal(signal.SIGTERM)
            except psutil.Error:
                continue
        _, alive = psutil.wait_procs(procs, timeout=3)
        for proc in alive:
            try:
                proc.kill()
            except psutil.Error:
                continue
        psutil.wait_procs(alive, timeout=3)
        if self._forks is not None:
            self._forks.close()
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
        self._ipp = self._client = self._forks = None
        self.ranks = ()
        self.backend = None
        self.state = "stopped"

    # -- running cells -----------------------------------------------------------------------

    def run_cell(self, source: str, timeout_s: float | None = None) -> SpmdResult:
        """Run ``source`` on every rank; rank 0's output, the gathered sharding, the events."""
        if self.state != "ready":
            raise SpmdError(
                f"The cluster is {self.state}. "
                + (
                    "Start it with %tpu cluster start v6e-4."
                    if self.state == "stopped"
                    else "Restart it with %tpu cluster restart (or cluster.restart())."
                )
            )
        self._raise_if_dead()
        client = self._client
        view = client[[r.engine_id for r in self.ranks]]
        self.failures = ()
        started = time.perf_counter()
        try:
            view.apply_sync(_engine.before_cell)
        except Exception as exc:  # noqa: BLE001 (an engine died: ipyparallel's error, any type)
            deadline = time.monotonic() + 3.0
            while time.monotonic() < deadline:  # its process may take a moment to show it
                self._raise_if_dead()
                time.sleep(0.1)
            raise SpmdError(f"The cell could not start on every rank: {exc}") from exc
        runs = [client[r.engine_id].execute(source, block=False, silent=False) for r in self.ranks]
        self._wait(runs, timeout_s)
        failures = [
            RankFailure(rank.rank, rank.pid, "raised", _traceback(run))
            for rank, run in zip(self.ranks, runs, strict=True)
            if not run.successful()
        ]
        _session_imports.update(dict.fromkeys(imports_of(source)))
        if failures:
            self.failures = tuple(failures)
            raise SpmdError(failure_message(failures, self.world_size, self._advice(failures)))
        gathered = view.apply_sync(_engine.after_cell)
        runs[0].wait_for_output(OUTPUT_S)
        first = runs[0].get()
        result = first.execute_result.get("data") if first.execute_result else None
        return SpmdResult(
            topology=self.topology.name,
            ranks=self.world_size,
            seconds=time.perf_counter() - started,
            stdout=runs[0].stdout,
            stderr=runs[0].stderr,
            result=result,
            sharding=gather(gathered),
            events=tuple(tuple(map(tuple, g["events"])) for g in gathered),
            hosts=tuple(r.host for r in self.ranks),
            hbm=tuple(tuple(g["hbm"]) for g in gathered),
        )

    def _advice(self, failures: list[RankFailure]) -> str:
        """What tpu_lab can tell about a cell that raised on every rank: the planner's message
        for a model the cell bound whose heads do not divide over the ranks; for a name the
        ranks do not know, that a new cluster's ranks start empty."""
        if len(failures) == self.world_size:
            try:
                refused = self._client[self.ranks[0].engine_id].apply_sync(
                    _engine.diagnose, self.world_size)
            except Exception:  # noqa: BLE001 (a rank that cannot answer: no advice)
                refused = None
            if refused:
                return (f"The tensor-parallel plan does not divide over {self.world_size} "
                        f"ranks. The planner says: {refused}")
        missing = {m for f in failures for m in _NAME_ERROR.findall(f.traceback)}
        if not missing:
            return ""
        names = ", ".join(sorted(missing))
        replayed = "; ".join(_session_imports) or "none yet"
        return (f"The ranks do not know {names}: the ranks of a cluster started (or restarted) "
                "begin with an empty namespace. tpu_lab ran the imports of your earlier "
                f"%%tpu spmd cells on them ({replayed}); run the %%tpu spmd cells that define "
                f"{names} again.")

    def _wait(self, runs, timeout_s: float | None) -> None:
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        first_error = None
        while not all(run.ready() for run in runs):
            pending = next(run for run in runs if not run.ready())
            pending.wait(0.05)
            self._raise_if_dead()
            now = time.monotonic()
            if first_error is None and any(run.ready() and not run.successful() for run in runs):
                first_error = now
            late = first_error is not None and now - first_error > GRACE_S
            if late or (deadline is not None and now > deadline):
                self.state = "broken"
                failures = []
                for rank, run in zip(self.ranks, runs, strict=True):
                    if run.ready() and not run.successful():
                        failures.append(RankFailure(rank.rank, rank.pid, "raised", _traceback(run)))
                    elif not run.ready():
                        why = (
                            "still running, probably waiting in a collective for the failed ranks"
                            if late
                            else f"still running after {timeout_s} s"
                        )
                        where = self._where(rank)
                        if where:
                            why += f"; where it is now (most recent call first):\n{where}"
                        failures.append(RankFailure(rank.rank, rank.pid, "hung", why))
                self.failures = tuple(failures)
                raise SpmdError(failure_message(failures, self.world_size))

    def _raise_if_dead(self) -> None:
        """If ranks died: a :class:`SpmdError` naming them (the cluster is broken), or, when
        every rank of a host died, naming the lost host, after stopping the other hosts."""
        dead = [r for r in self.ranks if not self._rank_alive(r)]
        if not dead:
            return
        # a lost host's ranks die together: let the others that are going show it
        deadline = time.monotonic() + SETTLE_S
        while time.monotonic() < deadline:
            time.sleep(0.1)
            now = [r for r in self.ranks if not self._rank_alive(r)]
            if len(now) == len(dead) and time.monotonic() > deadline - SETTLE_S / 2:
                break
            dead = now
        self.state = "broken"
        failures = [RankFailure(r.rank, r.pid, "died", self._exit_text(r)) for r in dead]
        self.failures = tuple(failures)
        lost = self._lost_hosts({r.rank for r in dead}) if self.owns_engines else {}
        if lost:
            others = len(self.hosts()) - len(lost)
            self._teardown()  # the other hosts cannot go on without the lost ones
            raise SpmdError(lost_hosts_message(lost, failures, others, self.topology.name))
        raise SpmdError(failure_message(failures, self.world_size))

    def _stack_path(self, rank: int) -> str:
        return _engine.stack_path(self._folder, rank)

    def _where(self, rank: Rank) -> str:
        """The Python stack of ``rank``'s main thread now, most recent call first ("" if the
        rank does not answer within :data:`STACK_S`)."""
        if not self.owns_engines:  # its pid may be another machine's
            return ""
        path = self._stack_path(rank.rank)
        start = os.path.getsize(path) if os.path.exists(path) else 0
        try:
            os.kill(rank.pid, _engine.STACK_SIGNAL)
        except OSError:
            return ""
        deadline = time.monotonic() + STACK_S
        while time.monotonic() < deadline:
            try:
                with open(path) as f:
                    f.seek(start)
                    frames = _main_thread(f.read())
            except OSError:
                return ""
            if frames:
                return frames
            time.sleep(0.05)
        return ""

    def hosts(self) -> dict[str, tuple[int, ...]]:
        """Each host and its ranks, in rank order."""
        out: dict[str, list[int]] = {}
        for r in self.ranks:
            out.setdefault(r.host, []).append(r.rank)
        return {host: tuple(ranks) for host, ranks in out.items()}

    def _lost_hosts(self, dead: set[int]) -> dict[str, tuple[int, ...]]:
        """The hosts all of whose ranks are in ``dead``, when the cluster has several hosts."""
        hosts = self.hosts()
        if len(hosts) < 2:
            return {}
        return {h: ranks for h, ranks in hosts.items() if set(ranks) <= dead}

    def _rank_alive(self, rank: Rank) -> bool:
        return _alive(rank.pid)

    def _exit_text(self, rank: Rank) -> str:
        """How ``rank``'s engine ended, as the fork server (its parent) reaped it."""
        pid = rank.pid
        deadline = time.monotonic() + 2.0
        code = None
        while self._forks is not None and code is None and time.monotonic() < deadline:
            code = self._forks.exit_status(pid)
            time.sleep(0.02)
        if code is None:
            return "the process is gone"
        if code < 0:
            return f"the process was killed by signal {signal.Signals(-code).name}"
        return f"the process exited with status {code}"

    def state_now(self) -> ClusterState:
        """What the cluster looks like now (whether each rank's process still runs)."""
        failed = {f.rank: f.reason for f in self.failures}
        ranks = tuple(
            (r.rank, r.pid, failed.get(r.rank) or ("running" if self._rank_alive(r) else "exited"))
            for r in self.ranks
        )
        return ClusterState(
            self.topology.name, self.state, self.ready_seconds, self.backend, ranks,
            tuple(self.hosts().items()),
        )  # fmt: skip


def _connect(cluster, timeout_s: float):
    """A client of ``cluster`` (an ``ipyparallel.Cluster`` whose controller started) once its
    controller has written the client's connection file."""
    path = cluster.controller.connection_files["client"]
    deadline = time.monotonic() + timeout_s
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"the controller wrote no connection file in {timeout_s:.0f} s")
        time.sleep(0.05)
    return client(path, cluster=cluster, profile_dir=cluster.profile_dir,
                  cluster_id=cluster.cluster_id)  # fmt: skip


def _alive(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_THREAD = re.compile(r"^(?:Current thread|Thread) 0x[0-9a-f]+", re.M)


def _main_thread(dump: str) -> str:
    """The frames of an engine's main thread in a faulthandler dump, from the most recent down
    to the cell (IPython's machinery below it is the same on every rank); "" until that thread
    is in the dump."""
    for block in _THREAD.split(dump):
        frames = [line.strip() for line in block.splitlines() if line.strip().startswith("File ")]
        if not frames or not frames[-1].endswith(" in <module>"):
            continue  # not the main thread (the engine's script at its bottom)
        shell = [i for i, line in enumerate(frames) if "IPython/core/interactiveshell.py" in line]
        frames = frames[: shell[0]] if shell else frames
        shown = ["  " + line for line in frames[:STACK_FRAMES]]
        if len(frames) > STACK_FRAMES:
            shown.append(f"  ... and {len(frames) - STACK_FRAMES} more")
        return "\n".join(shown)
    return ""


def _traceback(run) -> str:
    """The remote traceback of a failed run, without terminal colours."""
    try:
        run.get(0)
    except Exception as error:  # noqa: BLE001 (the remote error, whatever its type)
        text = getattr(error, "traceback", None) or f"{type(error).__name__}: {error}"
        return _ANSI.sub("", text if isinstance(text, str) else "\n".join(text))
    return ""


# -- module-level controller (what %tpu cluster calls) ----------------------------------------


def start(topology: str = "v6e-4") -> Cluster:
    """Start the cluster for ``topology`` (one engine per chip); returns the running one if it
    already runs that topology."""
    global _current
    with _lock:
        if _current is not None and _current.state != "stopped":
            if _current.topology.name == topology or _current.topology.name == str(topology):
                return _current
            raise SpmdError(
                f"A {_current.topology.name} cluster is running; stop it first "
                "(%tpu cluster stop) to start another topology."
            )
        _current = Cluster(topology)
        return _current.start()


def adopt(make) -> Cluster:
    """Make the cluster ``make()`` builds the current one and start it; refused while another
    is in use (:func:`tpu_lab.launch.connect.connect` attaches one this way)."""
    global _current
    with _lock:
        if _current is not None and _current.state != "stopped":
            raise SpmdError(
                f"A {_current.topology.name} cluster is in use; stop it first (%tpu cluster stop)."
            )
        _current = make()
        return _current.start()


def current() -> Cluster:
    """The cluster started last (running or not)."""
    if _current is None:
        raise SpmdError("No cluster has been started: %tpu cluster start v6e-4.")
    return _current


def stop() -> None:
    """Stop the current cluster, if any; no process is left behind."""
    with _lock:
        if _current is not None:
            _current.stop()


def restart() -> Cluster:
    """Stop and start the current cluster (after a rank died or hung)."""
    with _lock:
        return current().restart()


atexit.register(stop)
