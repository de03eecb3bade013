"""What runs inside each engine of a :mod:`tpu_lab.launch.cluster`: one rank, one chip.

The cluster calls these functions on its engines (ipyparallel ``apply``); the user's cell runs
in the engine's IPython namespace between :func:`before_cell` and :func:`after_cell`.
"""

from __future__ import annotations

import faulthandler
import os
import signal
from datetime import timedelta

#: The signal that makes a rank write the Python stack of every thread to its stack file.
STACK_SIGNAL = signal.SIGUSR1

_snapshot: dict = {}
_stack_file = None


def describe(controller_ip: str) -> dict:
    """This engine before it joins: its pid and host, the address its host is reached at (the
    one it reaches the controller from), the simulated topology it was given, and how many
    devices it drives."""
    import socket

    import torch

    from .. import runtime

    if controller_ip.startswith("127."):
        address = controller_ip
    else:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((controller_ip, 9))  # no packet: picks the interface
            address = probe.getsockname()[0]
    simulated = runtime.backend().simulated
    return {
        "pid": os.getpid(),
        "host": host_name(),
        "worker": os.environ.get("TPU_WORKER_ID"),
        "address": address,
        "topology": os.environ.get("TPU_LAB_TOPOLOGY"),
        "devices": 1 if simulated else torch.accelerator.device_count(),
    }


_store = None


def open_store(address: str, world_size: int, timeout_s: float) -> int:
    """Serve the process group's rendezvous store from this engine (rank 0), listening on
    ``address`` only; returns its port."""
    import socket

    import torch.distributed as dist

    global _store
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind((address, 0))
    sock.listen(128)
    port = sock.getsockname()[1]
    _store = (
        dist.TCPStore(
            address, port, world_size, is_master=True, timeout=timedelta(seconds=timeout_s),
            wait_for_workers=False, master_listen_fd=sock.fileno(),
        ),
        sock,
    )  # fmt: skip
    return port


def leave() -> None:
    """Leave the process group (the engine stays, for its owner)."""
    global _store
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()
    if _store is not None:
        _store[1].close()
        _store = None


def setup(
    world_size: int,
    store: str | tuple[str, int],
    timeout_s: float,
    folder: str,
    rank: int | None = None,
    address: str | None = None,
    host: tuple[int, int, int] | None = None,
) -> dict:
    """Join the ``tpu_dist`` process group as ``rank`` (default: this process's ``RANK``, which
    the cluster's launcher set); bind this process to its one chip. ``store`` is a FileStore's
    path, or the (address, port) of rank 0's store; ``address`` is the one gloo listens on
    (default 127.0.0.1); ``host`` is (host index, this rank's index on it, ranks per host).

    On :data:`STACK_SIGNAL` the rank appends every thread's Python stack to
    ``folder/stack-RANK.txt`` (faulthandler writes it from the signal handler: a rank stuck in
    C code, even holding the GIL, still says where it is)."""
    global _stack_file
    if rank is None:
        rank = int(os.environ["RANK"])
    else:
        group, local, per_host = host or (0, rank, world_size)
        os.environ.update(
            RANK=str(rank), LOCAL_RANK=str(local), WORLD_SIZE=str(world_size),
            GROUP_RANK=str(group), LOCAL_WORLD_SIZE=str(per_host),
        )  # fmt: skip
    os.makedirs(folder, exist_ok=True)
    _stack_file = open(stack_path(folder, rank), "a")  # noqa: SIM115 (for the engine's life)
    faulthandler.register(STACK_SIGNAL, file=_stack_file, all_threads=True)
    import torch.distributed as dist

    from .. import runtime
    from . import tpu_dist
    from .torchrun import bind

    if address is not None:
        tpu_dist.listen_on(address)
    backend = bind(world_size)  # as a torchrun rank: its chip, tpu_dist, tpu:0
    if isinstance(store, str):
        rendezvous = dist.FileStore(store, world_size)
    elif _store is not None:
        rendezvous = _store[0]
    else:
        rendezvous = dist.TCPStore(
            store[0], store[1], world_size, is_master=False, timeout=timedelta(seconds=timeout_s)
        )
    dist.init_process_group(
        backend,
        store=rendezvous,
        rank=rank,
        world_size=world_size,
        timeout=timedelta(seconds=timeout_s),
    )
    status = runtime.backend().status()
    return {
        "rank": rank,
        "pid": os.getpid(),
        "host": host_name(),
        "backend": status.backend,
        "device": status.device_name,
    }


def host_name() -> str:
    """This process's host: its name in ``TPU_WORKER_HOSTNAMES`` (a pod worker, simulated or
    not), else the machine's name."""
    import socket

    names = os.environ.get("TPU_WORKER_HOSTNAMES", "").split(",")
    worker = os.environ.get("TPU_WORKER_ID", "")
    if worker.isdigit() and int(worker) < len(names) and names[int(worker)]:
        return names[int(worker)]
    return socket.gethostname()


def stack_path(folder: str, rank: int) -> str:
    """Where rank ``rank`` writes its stacks."""
    return os.path.join(folder, f"stack-{rank}.txt")


def _user_ns() -> dict:
    from IPython import get_ipython

    return get_ipython().user_ns


def before_cell() -> None:
    from ..events import log

    _snapshot["names"] = {k: id(v) for k, v in _user_ns().items() if not k.startswith("_")}
    _snapshot["seq"] = log.last_seq()


def after_cell() -> dict:
    """The DTensors (and modules holding DTensors) the cell bound, and the events it caused."""
    from ..events import log

    before = _snapshot.get("names", {})
    seq = _snapshot.get("seq", 0)
    sharded = {}
    for name, value in list(_user_ns().items()):
        if name.startswith("_") or before.get(name) == id(value):
            continue
        summary = _describe(value)
        if summary is not None:
            sharded[name] = summary
    from .. import runtime

    events = [(e.kind, e.summary) for e in log.since(seq)]
    hbm = runtime.backend().memory()
    return {"sharding": sharded, "events": events, "hbm": (hbm.live, hbm.peak, hbm.capacity)}


def _describe(value) -> dict | None:
    import torch
    from torch.distributed.tensor import DTensor

    from ..errors import ShardingError
    from ..sharding.info import sharding_info

    if isinstance(value, DTensor):
        local = value.to_local()
        try:
            info = sharding_info(value)
        except ShardingError:  # a placement tpu_lab cannot draw: report it as DTensor names it
            info = None
        return {
            "kind": "tensor",
            "global_shape": tuple(value.shape),
            "dtype": str(value.dtype).removeprefix("torch."),
            "mesh_shape": tuple(value.device_mesh.shape),
            "placements": info.placements if info else tuple(map(str, value.placements)),
            "local_shape": tuple(local.shape),
            "local_bytes": local.numel() * local.element_size(),
            "info": info,
        }
    if isinstance(value, torch.nn.Module):
        tensors = [*value.parameters(), *value.buffers()]
        sharded = [t for t in tensors if isinstance(t, DTensor)]
        if not sharded:
            return None
        local = [t.to_local() if isinstance(t, DTensor) else t for t in tensors]
        return {
            "kind": "module",
            "class": type(value).__name__,
            "tensors": len(tensors),
            "sharded": len(sharded),
            "global_bytes": sum(t.numel() * t.element_size() for t in tensors),
            "local_bytes": sum(t.numel() * t.element_size() for t in local),
        }
    return None


def diagnose(world_size: int) -> str | None:
    """The planner's refusal of a model the last cell bound, when its attention heads do not
    divide over the ranks (why a tensor-parallel forward fails with a shape error on every
    rank); None when no model is refused."""
    import torch

    from ..errors import ShardingError
    from ..sharding.plan import check_heads

    before = _snapshot.get("names", {})
    for name, value in list(_user_ns().items()):
        if name.startswith("_") or before.get(name) == id(value):
            continue
        if not isinstance(value, torch.nn.Module):
            continue
        try:
            check_heads(value, world_size)
        except ShardingError as exc:
            return f"{name}: {exc}"
    return None
