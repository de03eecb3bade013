"""TorchTPU's launch environment on the bundled device: the topology for N ranks
(:func:`topology_for`), ``torch.tpu.distributed.set_tpu_launch_env``, which the bundled
``torch.tpu`` and the ``torch_tpu`` stand-in offer and :mod:`tpu_lab.launch.torchrun` and the
SPMD cluster call in the parent of the ranks (``torch.tpu``'s defaults ``nproc_per_node`` to the
simulated topology's devices per host), and the environment each host of a simulated pod slice
starts with (:func:`host_environment`). Nothing here asks which backend runs: it is the bundled
device's.

``set_tpu_launch_env`` follows torch-tpu 0.2.0's ``_internal/distributed/distributed.py``: it
only sets variables that are unset; one host gets ``TORCH_TPU_TOPOLOGY`` and the XProf session
id; several hosts (``nnodes > 1``, two or more names in ``TPU_WORKER_HOSTNAMES``, or
``JOB_COMPLETION_INDEX`` set) also get ``TORCH_TPU_SLICEBUILDER_ADDRESSES`` (``host:8070+i`` for
each device of each host), ``NNODES``, ``NODE_RANK`` (from the host's place in the slice when
``TORCH_TPU_TOPOLOGY`` was given from outside, else ``JOB_COMPLETION_INDEX``), ``MASTER_ADDR``
(the first host) and ``MASTER_PORT`` 29500, and ``TORCH_TPU_TOPOLOGY`` becomes the host's own
chips. Its errors are TorchTPU's ``ValueError`` texts.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Mapping

from ..errors import SpmdError

#: The generation chosen when the launch names none.
DEFAULT_GENERATION = "v6e"
#: TorchTPU's first slicebuilder port on each host (``TORCH_TPU_BASE_PORT``'s default).
BASE_PORT = 8070
#: TorchTPU's default rendezvous port on multi-host jobs.
MASTER_PORT = "29500"
#: The names of a simulated slice's hosts: ``tpu-lab-w-0``, ``tpu-lab-w-1``, ...
HOST_PREFIX = "tpu-lab-w-"
#: Where the simulated hosts' rendezvous and collectives run: this machine only.
LOOPBACK = "127.0.0.1"


def topology_for(world_size: int, generation: str | None = None, hosts: int = 1) -> str:
    """A topology name with ``world_size`` devices on ``hosts`` hosts: ``generation``'s, else
    the first of v6e, v5p, v4, v5e and v7 that has one."""
    from ..hardware.slices import multi_host
    from ..hardware.topology import GENERATIONS, Topology

    order = [generation] if generation else [DEFAULT_GENERATION, "v5p", "v4", "v5e", "v7"]
    for name in order:
        if name not in GENERATIONS:
            known = ", ".join(GENERATIONS)
            raise SpmdError(f"Unknown TPU generation {name!r}; use one of {known}.")
        gen = GENERATIONS[name]
        if (hosts == 1 and world_size in gen.topologies) or (
            (world_size, hosts) in multi_host(name)
        ):
            return Topology(gen, world_size, hosts).name
    if hosts == 1:
        counts = sorted({n for g in GENERATIONS.values() for n in g.topologies})
        raise SpmdError(
            f"No simulated topology of {generation or 'any generation'} has {world_size} "
            f"devices on one host; use --nproc-per-node with one of {counts}."
        )
    layouts = sorted(
        {(h, d // h) for g in order for d, h in multi_host(g)}, key=lambda x: (x[0] * x[1], x)
    )
    shown = ", ".join(f"--nnodes {h} --nproc-per-node {p}" for h, p in layouts[:8])
    raise SpmdError(
        f"No simulated pod slice of {generation or 'any generation'} has {hosts} hosts of "
        f"{world_size // hosts} devices; use one of: {shown}."
    )


def host_names(hosts: int) -> list[str]:
    """The names of a simulated slice's hosts (``TPU_WORKER_HOSTNAMES``)."""
    return [f"{HOST_PREFIX}{i}" for i in range(hosts)]


def _bounds(values) -> str:
    return ",".join(map(str, values))


def worker_environment(topology: str, host: int) -> dict[str, str]:
    """What a worker (TPU VM) ``host`` of ``topology`` has before anything is launched: its
    id, the list of workers, the slice's accelerator type and libtpu's bounds (hosts, chips
    per host; one process per chip), and the simulated topology (``TPU_LAB_TOPOLOGY``). On
    this machine the rendezvous runs on 127.0.0.1 (``MASTER_ADDR``)."""
    from ..hardware.topology import parse_topology

    topo = parse_topology(topology)
    s = topo.slice
    if not 0 <= host < s.hosts:
        raise SpmdError(f"{topo.name} has hosts 0 to {s.hosts - 1}, not host {host}.")
    return {
        "TPU_LAB_TOPOLOGY": topo.name,
        "TPU_WORKER_ID": str(host),
        "TPU_WORKER_HOSTNAMES": ",".join(host_names(s.hosts)),
        "TPU_ACCELERATOR_TYPE": s.accelerator_type,
        "TPU_HOST_BOUNDS": _bounds(s.host_bounds),
        "TPU_CHIPS_PER_HOST_BOUNDS": _bounds(s.host_shape[:3]),
        "TPU_PROCESS_BOUNDS": _bounds(s.shape[:3]),
        "TPU_CHIPS_PER_PROCESS_BOUNDS": "1,1,1",
        "MASTER_ADDR": LOOPBACK,
    }


def host_environment(topology: str, host: int) -> dict[str, str]:
    """Everything the ranks of ``host`` inherit on a simulated pod: the worker's environment
    (:func:`worker_environment`), the slice's mesh given from outside as
    ``TORCH_TPU_TOPOLOGY`` (so that ``NODE_RANK`` comes from the host's place in the slice),
    then what ``set_tpu_launch_env(nnodes=hosts, nproc_per_node=devices per host)`` adds."""
    from ..hardware.topology import parse_topology

    s = parse_topology(topology).slice
    env = worker_environment(topology, host)
    if s.hosts > 1:
        env["TORCH_TPU_TOPOLOGY"] = _bounds(s.shape)
    env.update(launch_variables(env, nnodes=s.hosts, nproc_per_node=s.devices_per_host))
    return env


def set_tpu_launch_env(*, nproc_per_node: int, nnodes: int | None = None) -> None:
    """TorchTPU's ``torch.tpu.distributed.set_tpu_launch_env`` on the bundled device: in the
    parent, before a launcher spawns the ranks, set what TorchTPU sets (see the module
    docstring) and choose the simulated topology (``TPU_LAB_TOPOLOGY``). As there, a variable
    already set is never overwritten."""
    for key, value in launch_variables(
        os.environ, nnodes=nnodes, nproc_per_node=nproc_per_node
    ).items():
        os.environ.setdefault(key, value)


def launch_variables(
    env: Mapping[str, str], *, nproc_per_node: int, nnodes: int | None = None
) -> dict[str, str]:
    """The variables :func:`set_tpu_launch_env` would set in an environment ``env``."""
    from ..hardware.topology import parse_topology

    out: dict[str, str] = {}

    def put(key: str, value) -> str:
        if key not in env and key not in out:
            out[key] = value() if callable(value) else value
        return env.get(key, out.get(key))

    put("TORCH_TPU_XPROF_SESSION_ID", lambda: str(time.time_ns()))
    names_text = env.get("TPU_WORKER_HOSTNAMES") or ""
    names = [h for h in names_text.split(",") if h]
    if nnodes is not None and names and nnodes != len(names):
        raise ValueError(
            "set_tpu_launch_env(): expected nnodes to match the number of hosts in "
            f'environment variable TPU_WORKER_HOSTNAMES ({len(names)}: "{names_text}"), '
            f"got {nnodes}"
        )
    index = env.get("JOB_COMPLETION_INDEX")
    if not ((nnodes or 1) > 1 or len(names) > 1 or index is not None):
        name = put("TPU_LAB_TOPOLOGY", lambda: topology_for(nproc_per_node))
        put("TORCH_TPU_TOPOLOGY", lambda: _bounds(parse_topology(name).shape))
        return out
    if not names:
        raise ValueError(
            "set_tpu_launch_env(): expected environment variable TPU_WORKER_HOSTNAMES to be a "
            "comma-separated list of worker hostnames or IP addresses, got it as unset"
        )
    hosts = nnodes or len(names)
    per_host = int(env.get("TORCH_TPU_DEVICES_PER_HOST") or nproc_per_node)
    name = put("TPU_LAB_TOPOLOGY", lambda: topology_for(hosts * per_host, hosts=hosts))
    topo = parse_topology(name)
    slice_mesh = env.get("TORCH_TPU_TOPOLOGY")  # only one given from outside spans the slice
    base = int(env.get("TORCH_TPU_BASE_PORT") or BASE_PORT)
    put(
        "TORCH_TPU_SLICEBUILDER_ADDRESSES",
        lambda: ",".join(f"{h}:{base + i}" for h in names for i in range(per_host)),
    )
    put("NNODES", str(hosts))
    put("NODE_RANK", lambda: str(_node_rank(env, topo, slice_mesh, index)))
    put("MASTER_ADDR", names[0])
    put("MASTER_PORT", MASTER_PORT)
    put("TORCH_TPU_TOPOLOGY", _bounds(topo.slice.host_shape))
    return out


def _node_rank(env: Mapping[str, str], topo, slice_mesh: str | None, index: str | None) -> int:
    """TorchTPU's ``NODE_RANK``: the host's place among the slice's hosts sorted Z-major,
    X-minor, found from its chips' coordinates (on the bundled device, those of worker
    ``TPU_WORKER_ID`` of the simulated slice) and the slice mesh; else ``index``."""
    worker = env.get("TPU_WORKER_ID")
    s = topo.slice
    if slice_mesh and worker is not None and s.hosts > 1:
        coords = s.chip_coords(s.ranks_of(int(worker))[0])[:3]
        parts = [int(p) for p in re.split(r"[,xX]", slice_mesh) if p.isdigit()]
        mesh = (parts + [1, 1, 1])[:3]
        bounds = [max(1, m // c) for m, c in zip(mesh, s.host_shape[:3], strict=True)]
        hosts = sorted(
            ((x, y, z) for x in range(bounds[0]) for y in range(bounds[1])
             for z in range(bounds[2])),
            key=lambda h: h[::-1],
        )  # fmt: skip
        mine = tuple(c // h for c, h in zip(coords, s.host_shape[:3], strict=True))
        if mine in hosts:
            return hosts.index(mine)
    if index is not None:
        return int(index)
    raise ValueError(
        "set_tpu_launch_env(): expected either TPU device coordinates together with "
        "environment variable TORCH_TPU_TOPOLOGY, or environment variable "
        "JOB_COMPLETION_INDEX to be a 0-based index of this host (Kubernetes Indexed Jobs set "
        "this automatically), to determine NODE_RANK, got neither"
    )
