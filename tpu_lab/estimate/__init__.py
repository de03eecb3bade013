"""Estimated TPU time: what a program would take on an idealised TPU chip.

Every estimate is labelled an estimate of an idealised chip: the chips' published peaks
(:mod:`~tpu_lab.estimate.chips`), FLOPs from PyTorch's own counter, bytes from the tensors an
op reads and writes, and a few named, settable assumptions (:mod:`~tpu_lab.estimate.constants`).
See ``docs/estimates.md`` for what is modelled and what is not.

- ``op_cost(signature(func, args, kwargs, out), on="v6e")``: one op (what a device records);
- ``estimate(fn, *args, on="v6e", mode="eager")``: a function's ops or its fused graph;
- ``estimate_graph(gm)``: an FX graph (a ``torch.compile`` backend's);
- ``with estimating() as r: ...; r.estimate()``: what the "tpu" device ran in the block;
- ``tpu_lab.sharding.plan(config, ...).estimate("train")``: a model from its config, no weights;
- ``roofline(estimate)``: the ops against the chip's roofline (matplotlib).
"""

from __future__ import annotations

import importlib

__all__ = [
    "CHIPS",
    "LABEL",
    "Chip",
    "Estimate",
    "OpCost",
    "OpSignature",
    "TensorSpec",
    "assume",
    "assumptions",
    "chip",
    "estimate",
    "estimate_graph",
    "estimate_plan",
    "estimating",
    "op_cost",
    "roofline",
    "settings",
    "signature",
]

_LAZY = {
    "CHIPS": ".chips", "Chip": ".chips",
    "LABEL": ".result", "Estimate": ".result", "OpCost": ".result",
    "OpSignature": ".ops", "TensorSpec": ".ops", "signature": ".ops",
    "assume": ".constants", "assumptions": ".constants", "settings": ".constants",
    "chip": ".api", "estimate": ".api", "estimate_graph": ".api", "op_cost": ".api",
    "estimate_plan": ".planner", "roofline": ".figures",
}


def estimating(on=None, title: str = "block"):
    """``with estimating() as r: ...`` then ``r.estimate()``: the block's ops as the bundled
    "tpu" device ran them, estimated on an idealised chip (``on``, default the simulated
    topology's generation); see :mod:`tpu_lab.estimate.recorded`. On a real TPU there is no
    such record: a clear error says what to use instead."""
    from ..device import current
    from ..errors import TpuLabError
    from ..runtime import backend

    if not backend().simulated:
        raise TpuLabError(
            "estimating() records the ops of tpu_lab's simulated 'tpu' device, and this process "
            "runs on a real TPU: time the block there with tpu_lab.timed, or estimate a function "
            "on meta tensors with tpu_lab.estimate.estimate(fn, *meta_args)."
        )
    return current().estimating(on, title)


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module 'tpu_lab.estimate' has no attribute '{name}'")
