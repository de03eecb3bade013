"""TorchTPU's launch environment on the bundled device: the topology for N ranks
(:func:`topology_for`) and ``torch.tpu.distributed.set_tpu_launch_env``, which the bundled
``torch.tpu`` and the ``torch_tpu`` stand-in offer and :mod:`.torchrun` and the SPMD cluster
call in the parent of the ranks (``torch.tpu``'s defaults ``nproc_per_node`` to the simulated
topology's devices). Nothing here asks which backend runs: it is the bundled device's."""

from __future__ import annotations

import os

from ..errors import NotSimulatedError, SpmdError

#: The generation chosen when the launch names none.
DEFAULT_GENERATION = "v6e"


def topology_for(world_size: int, generation: str | None = None) -> str:
    """A topology name with ``world_size`` devices: ``generation``'s, else the first of v6e,
    v5p, v4, v5e and v7 that has one."""
    from .topology import GENERATIONS

    order = [generation] if generation else [DEFAULT_GENERATION, "v5p", "v4", "v5e", "v7"]
    for name in order:
        if name not in GENERATIONS:
            known = ", ".join(GENERATIONS)
            raise SpmdError(f"Unknown TPU generation {name!r}; use one of {known}.")
        if world_size in GENERATIONS[name].topologies:
            return f"{name}-{world_size}"
    counts = sorted({n for g in GENERATIONS.values() for n in g.topologies})
    raise SpmdError(
        f"No simulated topology of {generation or 'any generation'} has {world_size} devices; "
        f"use --nproc-per-node with one of {counts}."
    )


def set_tpu_launch_env(*, nproc_per_node: int, nnodes: int | None = None) -> None:
    """TorchTPU's ``torch.tpu.distributed.set_tpu_launch_env`` on the bundled device: in the
    parent, before a launcher spawns the ranks, choose the simulated topology (one device per
    rank: ``TPU_LAB_TOPOLOGY``) and set what TorchTPU sets that code may read
    (``TORCH_TPU_TOPOLOGY`` as ``"2,2,1"``, ``TORCH_TPU_XPROF_SESSION_ID``). As there, a
    variable already set is never overwritten. One host only (``nnodes`` 1)."""
    import time

    from .topology import parse_topology

    if nnodes not in (None, 1):
        raise NotSimulatedError(
            f"set_tpu_launch_env(nnodes={nnodes}): the bundled device simulates one host."
        )
    name = os.environ.setdefault("TPU_LAB_TOPOLOGY", topology_for(nproc_per_node))
    shape = parse_topology(name).shape
    os.environ.setdefault("TORCH_TPU_TOPOLOGY", ",".join(map(str, shape)))
    os.environ.setdefault("TORCH_TPU_XPROF_SESSION_ID", str(time.time_ns()))
