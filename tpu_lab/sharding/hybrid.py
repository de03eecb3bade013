"""Tensor parallelism within a host, data parallelism across hosts: the layout pod slices ask for.

A tensor-parallel layer exchanges activations at every layer, so its ranks stay on one host
(each host's chips are one 2x2 block of the slice's ICI mesh); data-parallel replicas exchange
gradients once a step, so they are the ranks that sit on different hosts. :func:`host_mesh` is
that 2-D ``DeviceMesh`` ("dp" across hosts, "tp" within a host) for the ranks of a torchrun job
or a ``%tpu cluster`` (ranks numbered host by host, ``LOCAL_WORLD_SIZE`` per host);
:func:`average_gradients` is the data-parallel step's all-reduce over "dp", after which every
replica holds the gradient of the whole batch.
"""

from __future__ import annotations

import os


def host_mesh(device_type: str = "tpu"):
    """The ("dp", "tp") mesh: one "dp" row per host, one "tp" column per rank of a host."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    from ..errors import ShardingError

    world = dist.get_world_size()
    per_host = int(os.environ.get("LOCAL_WORLD_SIZE") or world)
    if world % per_host:
        raise ShardingError(
            f"{world} ranks do not split into hosts of LOCAL_WORLD_SIZE={per_host}; launch the "
            "same number of ranks on every host."
        )
    return init_device_mesh(device_type, (world // per_host, per_host), mesh_dim_names=("dp", "tp"))


def average_gradients(model, mesh) -> None:
    """Average every gradient of ``model`` over the mesh's "dp" dimension, in place."""
    import torch.distributed as dist

    group = mesh.get_group("dp")
    replicas = mesh.size(mesh.mesh_dim_names.index("dp"))
    for param in model.parameters():
        if param.grad is None:
            continue
        local = param.grad.to_local() if hasattr(param.grad, "to_local") else param.grad
        dist.all_reduce(local, group=group)
        local.div_(replicas)


def tensor_parallel(model, mesh):
    """Split ``model`` over the mesh's "tp" dimension as its own tensor-parallel plan says
    (:func:`~.plan.model_tp_plan`): its "colwise" and "rowwise" layers with torch's
    ``ColwiseParallel``/``RowwiseParallel``, everything else replicated. Returns ``model``."""
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    from .plan import match_plan, model_tp_plan, style_name

    styles = {"colwise": ColwiseParallel, "rowwise": RowwiseParallel}
    plan = {
        name: styles[style_name(style)]()
        for name, (_, style) in match_plan(model, model_tp_plan(model)).items()
        if style_name(style) in styles
    }
    return parallelize_module(model, mesh["tp"], plan)
