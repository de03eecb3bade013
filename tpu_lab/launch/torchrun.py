"""``torchrun`` on the bundled device: each process drives one simulated chip and joins "tpu_dist".

TorchTPU's distributed tutorial launches ``torchrun --nproc-per-node N script.py`` and calls
``dist.init_process_group("tpu_dist")`` in the script. Here:

- :func:`bind` makes this process one rank's chip: the topology has ``WORLD_SIZE`` devices, the
  ``"tpu_dist"`` backend is registered (gloo on 127.0.0.1 on the bundled device; TorchTPU's own
  on a TPU VM) and the process drives ``tpu:0``. The SPMD cluster (``%tpu cluster``) binds its
  engines with the same function.
- ``import tpu_lab`` in a torchrun worker (``TORCHELASTIC_RUN_ID`` is set) calls :func:`bind`, so
  plain ``torchrun script.py`` works when the script imports ``tpu_lab`` or ``torch_tpu``.
- :func:`launch` (``python -m tpu_lab.torchrun [torchrun options] script.py [args]``) runs
  torchrun with every worker started through :mod:`._torchrun_worker` (which imports tpu_lab
  before the script), the rendezvous on 127.0.0.1, and the topology chosen once for all ranks.
  On a TPU VM it first calls TorchTPU's ``torch.tpu.distributed.set_tpu_launch_env``, which sets
  ``TORCH_TPU_TOPOLOGY``, ``TORCH_TPU_SLICEBUILDER_ADDRESSES`` and ``TORCH_TPU_XPROF_SESSION_ID``
  (torch-tpu 0.2.0 binds each rank to its chip through these, not libtpu's
  ``TPU_VISIBLE_CHIPS``/``TPU_PROCESS_BOUNDS``, which it never reads). A rank that fails or is
  killed is reported by rank, pid and signal; torchrun stops the others, and nothing is left.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import uuid
from dataclasses import dataclass

from ..device.launch_env import host_environment, set_tpu_launch_env, topology_for
from ..errors import SpmdError

#: Internal: marks every process of one ``python -m tpu_lab.torchrun`` launch (tests use it to
#: check that none is left).
LAUNCH_ENV = "TPU_LAB_TORCHRUN"
def prepare_launch(
    nproc: int, generation: str | None = None, *, nnodes: int = 1, node_rank: int = 0
) -> str:
    """In the parent of ``nproc`` ranks (torchrun, the SPMD cluster) on host ``node_rank`` of
    ``nnodes``: the launch environment every rank inherits. Bundled device: one host,
    :func:`set_tpu_launch_env`; several, the environment of that host of the simulated slice
    (:func:`~tpu_lab.device.launch_env.host_environment`). TPU VM: TorchTPU's own
    ``torch.tpu.distributed.set_tpu_launch_env`` (verified against torch-tpu 0.2.0's source,
    not run on hardware here). Returns the topology's description."""
    from ..runtime import backend

    if backend().simulated:
        if nnodes > 1:
            name = os.environ.get("TPU_LAB_TOPOLOGY") or topology_for(
                nproc * nnodes, generation, hosts=nnodes
            )
            for key, value in host_environment(name, node_rank).items():
                os.environ.setdefault(key, value)
            return name
        if generation is not None:
            os.environ.setdefault("TPU_LAB_TOPOLOGY", topology_for(nproc, generation))
        set_tpu_launch_env(nproc_per_node=nproc)
        return os.environ["TPU_LAB_TOPOLOGY"]
    import torch

    torch.tpu.distributed.set_tpu_launch_env(
        nnodes=nnodes if nnodes > 1 else None, nproc_per_node=nproc
    )
    return "TPU " + os.environ.get("TORCH_TPU_TOPOLOGY", "")


def bind(world_size: int | None = None) -> str:
    """Make this process one rank's chip (see the module docstring); returns the backend name."""
    import torch

    from ..runtime import backend
    from .tpu_dist import register

    world_size = int(os.environ.get("WORLD_SIZE", "1")) if world_size is None else world_size
    hosts = world_size // int(os.environ.get("LOCAL_WORLD_SIZE") or world_size)
    active = backend()
    if active.simulated:
        from ..hardware.topology import parse_topology

        topology = parse_topology(active.status().topology)
        if (topology.devices, topology.hosts) != (world_size, hosts):
            active.use_topology(topology_for(world_size, hosts=hosts))
        if hosts > 1 and "TPU_WORKER_ID" not in os.environ:  # plain torchrun across hosts
            name = active.status().topology
            group = int(os.environ.get("GROUP_RANK", 0))
            for key, value in host_environment(name, group).items():
                os.environ.setdefault(key, value)
        if hosts > 1:  # the chip of the host this rank drives
            os.environ.setdefault("TPU_VISIBLE_CHIPS", os.environ.get("LOCAL_RANK", "0"))
    name = register()
    # As transformers does: this process drives one chip, always tpu:0.
    torch.accelerator.set_device_index(torch.accelerator.current_device_index())
    return name


@dataclass(frozen=True)
class LaunchResult:
    """How a launch ended: ``failed`` holds one line per rank that failed on its own (empty:
    success), ``stopped`` the ranks torchrun then stopped."""

    nproc: int
    topology: str
    returncode: int
    failed: tuple[str, ...] = ()
    stopped: tuple[int, ...] = ()

    def __str__(self) -> str:
        if not self.failed:
            return f"torchrun: {self.nproc} ranks on {self.topology} finished."
        lines = [f"torchrun: {len(self.failed)} of {self.nproc} ranks failed on {self.topology}:"]
        lines += [f"  {line}" for line in self.failed]
        if self.stopped:
            ranks = ", ".join(map(str, self.stopped))
            plural = "s" if len(self.stopped) > 1 else ""
            lines.append(f"  rank{plural} {ranks}: stopped by torchrun")
        return "\n".join(lines)


def _how(failure) -> str:
    code = failure.exitcode
    if code is not None and code < 0:
        return f"killed by {signal.Signals(-code).name}"
    message = failure.message
    while isinstance(message, dict):  # from the rank's error file (@record): the exception
        message = message.get("message", "")
    last = message.strip().splitlines()[0] if isinstance(message, str) and message.strip() else ""
    return f"exited with code {code}" + (f": {last}" if last and "To enable" not in last else "")


def _result(nproc: int, topology: str, error) -> LaunchResult:
    """The ranks that failed on their own, and those torchrun stopped with SIGTERM after.

    A rank killed by SIGTERM counts as stopped unless every failure is a SIGTERM; then the
    first one failed. torchrun's own "first failure" cannot decide it: its timestamps are
    whole seconds, so a rank it stopped in the same second ties with the one that died."""
    failures = sorted(error.failures.items())
    own = [rank for rank, f in failures if f.exitcode != -signal.SIGTERM]
    if not own:
        own = [error.get_first_failure()[0]]
    failed = [f"rank {rank} (pid {f.pid}) {_how(f)}" for rank, f in failures if rank in own]
    stopped = [rank for rank, _ in failures if rank not in own]
    return LaunchResult(nproc, topology, 1, tuple(failed), tuple(stopped))


def _loopback_store(port: int = 0):
    """A TCPStore server listening on 127.0.0.1 only (on ``port``, or a free one), and its
    port. torchrun's rendezvous asks for a multi-tenant store on that port in this process and
    gets this one (c10d shares a server per port), instead of a server listening on every
    interface."""
    from datetime import timedelta

    import torch.distributed as dist

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", port))
    sock.listen(128)
    port = sock.getsockname()[1]
    store = dist.TCPStore(
        "127.0.0.1",
        port,
        is_master=True,
        timeout=timedelta(seconds=300),
        wait_for_workers=False,
        multi_tenant=True,
        master_listen_fd=sock.fileno(),
    )
    return store, sock, port


def launch(argv: list[str], *, generation: str | None = None) -> LaunchResult:
    """``torchrun`` with ``argv`` (its options, the script, the script's arguments)."""
    from torch.distributed import run
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError


    parser = run.get_args_parser()
    args = parser.parse_args(argv)
    nproc = int(args.nproc_per_node) if str(args.nproc_per_node).isdigit() else 1
    nnodes = int(args.nnodes) if str(args.nnodes).isdigit() else 1
    os.environ.setdefault(LAUNCH_ENV, uuid.uuid4().hex)
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # torchrun's default, without its warning
    topology = prepare_launch(nproc, generation, nnodes=nnodes, node_rank=args.node_rank)
    rest = argv[len(argv) - len(args.training_script_args) - 1 :]
    options = argv[: len(argv) - len(rest)]
    if args.module or args.no_python:
        raise SpmdError("python -m tpu_lab.torchrun runs a script; -m/--no-python are not taken.")
    keep = ()
    if not args.standalone and args.rdzv_endpoint == "" and args.nnodes in ("1", "1:1"):
        *keep, port = _loopback_store()
        options += ["--master-addr", "127.0.0.1", "--master-port", str(port)]
    elif nnodes > 1 and args.node_rank == 0 and args.rdzv_backend == "static":
        # the first host serves the static rendezvous: on 127.0.0.1 when that is its address
        endpoint = args.rdzv_endpoint or f"{args.master_addr}:{args.master_port}"
        host, _, port = endpoint.rpartition(":")
        if host in ("127.0.0.1", "localhost") and port.isdigit():
            *keep, _ = _loopback_store(int(port))
    full = [*options, "-m", "tpu_lab.launch._torchrun_worker", *rest]
    try:
        run.main(full)
    except ChildFailedError as error:
        return _result(nproc, topology, error)
    finally:
        for resource in reversed(keep):
            if isinstance(resource, socket.socket):
                resource.close()
        del keep
    return LaunchResult(nproc, topology, 0)


def main(argv: list[str] | None = None) -> int:
    """``python -m tpu_lab.torchrun``: exit status 0 when every rank finished."""
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(
            "usage: python -m tpu_lab.torchrun [torchrun options] script.py [args]\n\n"
            "torchrun where each process drives one chip of the simulated topology (one with\n"
            "--nproc-per-node devices; TPU_LAB_TOPOLOGY picks another) and\n"
            "init_process_group('tpu_dist') works; on a TPU VM, TorchTPU's launch environment\n"
            "is set first. The script may import torch_tpu (tpu_lab's stand-in where TorchTPU\n"
            "is absent)."
        )
        return 0
    result = launch(argv)
    print(result, file=sys.stderr if result.returncode else sys.stdout)
    return result.returncode
