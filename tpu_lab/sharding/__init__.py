"""Sharding across chips: plan it without weights, run it on a simulated mesh, see it.

``tpu_lab.sharding.plan(config_or_model, chips=4, generation="v6e")`` lays a model out over the
chips of a TPU generation from its tensor-parallel plan (no weights, no download);
``SimulatedMesh`` runs tensor-parallel forward passes over N simulated chips in one process;
``plan(...).estimate("train")`` estimates one step of the plan on an idealised chip
(:mod:`.step_estimate`); ``choose(config, "train", batch=, seq=)`` weighs every TPU slice and
split that fits the step, by expected time and list price (:mod:`.chooser`). Running SPMD
cells on one process per chip is :mod:`tpu_lab.launch`'s.
Everything here is data; the pictures are views: ``tpu_lab.view(obj)`` draws a tensor's shards,
a model's placement table, a plan or a run, ``tpu_lab.views.figure(obj)`` the same with
matplotlib.
"""

from __future__ import annotations

from .info import (
    ModelLayout,
    ShardingInfo,
    TensorLayout,
    layout_info,
    model_layout,
    sharding_info,
)
from .plan import Plan, plan, plan_layout

__all__ = [
    "Choice",
    "MeshRun",
    "ModelLayout",
    "Option",
    "Plan",
    "ShardingInfo",
    "SimulatedMesh",
    "TensorLayout",
    "choose",
    "layout_info",
    "model_layout",
    "plan",
    "plan_layout",
    "sharding_info",
    "simulate",
]

_LAZY = {
    "choose": "tpu_lab.sharding.chooser",
    "Choice": "tpu_lab.sharding.chooser",
    "Option": "tpu_lab.sharding.chooser",
    "SimulatedMesh": "tpu_lab.sharding.mesh",
    "MeshRun": "tpu_lab.sharding.mesh",
    "simulate": "tpu_lab.sharding.mesh",
}


def __getattr__(name: str):
    import importlib

    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'tpu_lab.sharding' has no attribute '{name}'")
