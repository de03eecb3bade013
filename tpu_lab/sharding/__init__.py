"""Sharding across chips: plan it without weights, run it on a simulated mesh, see it.

``tpu_lab.sharding.plan(config_or_model, chips=4, generation="v6e")`` lays a model out over the
chips of a TPU generation from its tensor-parallel plan (no weights, no download);
``SimulatedMesh`` runs tensor-parallel forward passes over N simulated chips in one process;
``view(obj)`` draws a tensor's shards, a model's placement table or a plan; ``cluster`` runs
SPMD cells on one process per chip.
"""

from __future__ import annotations

from .info import (
    ModelLayout,
    ShardingError,
    ShardingInfo,
    TensorLayout,
    layout_info,
    model_layout,
    sharding_info,
)
from .plan import Plan, plan, plan_layout

__all__ = [
    "MeshRun",
    "ModelLayout",
    "Plan",
    "ShardingError",
    "ShardingInfo",
    "SimulatedMesh",
    "TensorLayout",
    "figure",
    "layout_info",
    "model_layout",
    "plan",
    "plan_layout",
    "sharding_info",
    "simulate",
    "view",
]

_LAZY = {
    "SimulatedMesh": "mesh",
    "MeshRun": "mesh",
    "simulate": "mesh",
    "view": "views",
    "figure": "views",
}


def __getattr__(name: str):
    if name == "cluster":
        import importlib

        return importlib.import_module(".cluster", __name__)
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'tpu_lab.sharding' has no attribute '{name}'")
