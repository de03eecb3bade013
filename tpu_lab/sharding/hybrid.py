"""Tensor parallelism within a host, data parallelism across hosts: the layout pod slices ask for.

A tensor-parallel layer exchanges activations at every layer, so its ranks stay on one host
(each host's chips are one 2x2 block of the slice's ICI mesh); data-parallel replicas exchange
gradients once a step, so they are the ranks that sit on different hosts. :func:`host_mesh` is
that 2-D ``DeviceMesh`` ("dp" across hosts, "tp" within a host) for the ranks of a torchrun job
or a ``%tpu cluster`` (ranks numbered host by host, ``LOCAL_WORLD_SIZE`` per host);
:func:`average_gradients` is the data-parallel step's all-reduce over "dp", after which every
replica holds the gradient of the whole batch; :func:`full_tensors` gathers a tensor-parallel
model's parameters or gradients whole, in the layout of the model before it was split (one
process's layout), to check a step against one process or to save it.

Diffusers' tensor-parallel plans (``from_pretrained(..., parallel_config=TensorParallelConfig(
mesh=mesh["tp"]))``) keep the per-head QK-norms of an attention replicated: each rank applies
them to its own heads only, so their gradients are a sum over the ranks of a host
(:func:`head_local_parameters`); and a packed row-wise layer (Flux's single-stream
``proj_out``, whose input is attention and MLP outputs side by side) holds on each rank a
slice of every block, not one contiguous slice. Both are handled here.
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


#: Names of the per-head norms in diffusers' attention modules: applied after the heads are split.
QK_NORMS = ("norm_q", "norm_k", "norm_added_q", "norm_added_k")


def _local(tensor):
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor


def head_local_parameters(model) -> list[str]:
    """The replicated parameters that each tensor-parallel rank applies to its own heads only:
    the QK-norms of every attention whose query projection is split (a ``DTensor``)."""
    found = []
    for name, module in model.named_modules():
        if not hasattr(getattr(getattr(module, "to_q", None), "weight", None), "placements"):
            continue
        for norm in QK_NORMS:
            sub = getattr(module, norm, None)
            if sub is not None:
                prefix = f"{name}.{norm}" if name else norm
                found += [f"{prefix}.{p}" for p, _ in sub.named_parameters()]
    return found


def average_gradients(model, mesh) -> None:
    """Average every gradient of ``model`` over the mesh's "dp" dimension, in place, after
    summing the head-local parameters' gradients over "tp" (:func:`head_local_parameters`).
    Afterwards every rank holds its part of the gradient of the whole batch."""
    import torch.distributed as dist

    grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    tp_group = mesh.get_group("tp")
    for name in head_local_parameters(model):
        if name in grads:
            dist.all_reduce(_local(grads[name]), group=tp_group)
    group = mesh.get_group("dp")
    replicas = mesh.size(mesh.mesh_dim_names.index("dp"))
    for grad in grads.values():
        local = _local(grad)
        dist.all_reduce(local, group=group)
        local.div_(replicas)


def _block_sizes(model) -> dict[str, tuple[int, list[int]]]:
    """(dim, block sizes) of each parameter a diffusers tensor-parallel plan packs in blocks."""
    plan = getattr(type(model), "_tp_plan", None)
    if not plan:
        return {}
    from diffusers.hooks.tensor_parallel import resolve_tp_shard_specs

    tp = next((p.device_mesh.size() for p in model.parameters() if hasattr(p, "device_mesh")), 1)
    return {n: (s.dim, s.block_sizes) for n, s in resolve_tp_shard_specs(model, plan, tp).items()
            if s.block_sizes and len(s.block_sizes) > 1}


def full_tensors(model, which: str = "grad") -> dict:
    """Every parameter (``which="param"``) or gradient (``"grad"``; parameters without one are
    left out) of a tensor-parallel ``model``, whole and on the CPU, keyed by name, in one
    process's layout. A collective over the tensor-parallel ranks: call it on every rank."""
    import torch

    if which not in ("grad", "param"):
        from ..errors import ShardingError

        raise ShardingError(f"full_tensors(which={which!r}): choose 'grad' or 'param'.")
    packed = _block_sizes(model)
    out = {}
    for name, param in model.named_parameters():
        value = param.grad if which == "grad" else param.detach()
        if value is None:
            continue
        if name in packed:  # each rank holds a slice of every block: regroup block by block
            dim, sizes = packed[name]
            ranks = value.device_mesh.size()
            parts = value.full_tensor().cpu().chunk(ranks, dim)
            blocks = [p.split([b // ranks for b in sizes], dim) for p in parts]
            value = torch.cat([blocks[r][b] for b in range(len(sizes)) for r in range(ranks)], dim)
        elif hasattr(value, "full_tensor"):
            value = value.full_tensor()
        out[name] = value.cpu()
    return out


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
