"""Activation checkpointing (rematerialisation) of a model's blocks, as a plan's training step
runs it and as you can run it yourself: ``checkpoint_blocks(model, "full")``.

A model's blocks are the children of its outermost ``nn.ModuleList`` s (a transformer's
decoder layers, a UNet's down and up blocks, a Flux transformer's double and single blocks).
Each block's forward runs under ``torch.utils.checkpoint`` (non-reentrant, the form PyTorch
recommends) with a policy:

- ``"none"``: nothing is recomputed; the backward reads what the forward saved;
- ``"full"``: each block keeps only its inputs; its whole forward runs again in the backward
  (MaxText's ``remat_policy: full``, its default);
- ``"dots"``: each block keeps the results of its matmuls and attention and recomputes the rest
  (norms, activations, casts) in the backward: PyTorch's selective activation checkpointing
  with a policy that saves matmuls, as JAX's ``checkpoint_dots`` and MaxText's ``save_dot_*``
  policies do.

The estimate's recording runs the same wrapped model, so its peak and its time count the
recomputed ops; on the bundled device the wrapped model runs for real, which is how the
estimate is checked.
"""

from __future__ import annotations

import contextlib
import functools
import types

import torch
from torch.utils.checkpoint import (
    CheckpointPolicy,
    checkpoint,
    create_selective_checkpoint_contexts,
    noop_context_fn,
)

from ..errors import ShardingError

POLICIES = ("none", "full", "dots")
aten = torch.ops.aten

#: The ops "dots" saves: matmuls, convolutions and attention (their backward reads them).
SAVED = {
    aten.mm.default, aten.bmm.default, aten.addmm.default, aten.baddbmm.default,
    aten.convolution.default, aten._scaled_dot_product_flash_attention_for_cpu.default,
    aten._scaled_dot_product_flash_attention.default,
    aten._scaled_dot_product_efficient_attention.default,
}


def _save_dots(ctx, op, *args, **kwargs) -> CheckpointPolicy:
    return CheckpointPolicy.MUST_SAVE if op in SAVED else CheckpointPolicy.PREFER_RECOMPUTE


def blocks(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The children of ``model``'s outermost ``ModuleList`` s, in order."""
    found: list[torch.nn.Module] = []
    inside: set[str] = set()
    for name, module in model.named_modules():
        if any(name.startswith(prefix) for prefix in inside):
            continue
        if isinstance(module, torch.nn.ModuleList):
            found += [m for m in module if m is not None]  # a list may hold None in a place
            inside.add(f"{name}." if name else "")
    return found


def _checkpointed(forward, context_fn, run_in):
    def again(*args, **kwargs):
        with run_in():
            return forward(*args, **kwargs)

    @functools.wraps(forward)
    def run(self, *args, **kwargs):
        return checkpoint(again, *args, use_reentrant=False, context_fn=context_fn, **kwargs)

    return run


def checkpoint_blocks(model: torch.nn.Module, policy: str, run_in=contextlib.nullcontext) -> int:
    """Run each block of ``model`` under ``policy`` (:data:`POLICIES`) from now on (this model
    instance only); returns how many blocks. ``run_in``: a context manager factory each run
    of a block's forward enters, its recomputation in the backward included (a torch-function
    mode the step runs under, which the backward does not keep). A model without blocks
    cannot be checkpointed block by block: a clear error says so."""
    check(policy)
    if policy == "none":
        return 0
    found = blocks(model)
    if not found:
        raise ShardingError(
            f"{type(model).__name__} has no blocks in an nn.ModuleList to checkpoint; use "
            "remat='none'."
        )
    context = (functools.partial(create_selective_checkpoint_contexts, _save_dots)
               if policy == "dots" else noop_context_fn)
    for block in found:
        block.forward = types.MethodType(_checkpointed(block.forward, context, run_in), block)
    return len(found)


def check(policy: str) -> str:
    """``policy`` if it is one of :data:`POLICIES`, else a :class:`ShardingError` naming them."""
    if policy not in POLICIES:
        raise ShardingError(f"remat must be one of {', '.join(POLICIES)}; got {policy!r}.")
    return policy
