"""Estimated TPU time: what a program would take on an idealised TPU chip.

Every estimate is labelled an estimate of an idealised chip: the chips' published peaks
(:mod:`~tpu_lab.hardware.chips`), FLOPs from PyTorch's own counter, bytes from the tensors an
op reads and writes, and a few named, settable assumptions (:mod:`~tpu_lab.estimate.assumed`).
See ``docs/estimates.md`` for what is modelled and what is not.

- ``op_cost(signature(func, args, kwargs, out), on="v6e")``: one op (what a device records);
- ``estimate(fn, *args, on="v6e", mode="eager")``: a function's ops or its fused graph;
- ``estimate_graph(gm)``: an FX graph (a ``torch.compile`` backend's);
- ``with tpu_lab.estimating() as r: ...; r.estimate()``: what the "tpu" device ran in the
  block (:mod:`.recorded`, started by :func:`tpu_lab.timing.estimating`);
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
    "op_cost",
    "roofline",
    "settings",
    "signature",
]

_LAZY = {
    "CHIPS": "..hardware.chips", "Chip": "..hardware.chips",
    "LABEL": ".result", "Estimate": ".result", "OpCost": ".result",
    "OpSignature": ".ops", "TensorSpec": ".ops", "signature": ".ops",
    "assume": ".assumed", "assumptions": ".assumed", "settings": ".assumed",
    "chip": ".api", "estimate": ".api", "estimate_graph": ".api", "op_cost": ".api",
    "roofline": ".figures",
}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module 'tpu_lab.estimate' has no attribute '{name}'")
