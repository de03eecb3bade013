"""Which view draws a data object: the one table from a data type to its view.

The data objects (a plan, a mesh run, a preview, a profile, an SPMD result, the cluster's
state...) are plain and know nothing of their pictures. :func:`view` finds the picture of one;
the ``%tpu`` magics and ``tpu_lab.preview`` show their results through it, and
:func:`register_formatters` tells IPython to do the same, so that a data object left as the
last expression of a cell is drawn. The table names modules and classes as text: looking a type
up imports nothing that was not imported already.
"""

from __future__ import annotations

import importlib
from typing import Any

from ..errors import TpuLabError
from .base import View

#: (module, class) of a data object -> (module, name) of what makes its view: a View class or a
#: function, called with the object and the view's options.
VIEWS: dict[tuple[str, str], tuple[str, str]] = {
    ("tpu_lab.runtime.base", "DeviceStatus"): ("tpu_lab.views.status", "device_view"),
    ("tpu_lab.sharding.info", "ShardingInfo"): ("tpu_lab.views.sharding", "ShardingView"),
    ("tpu_lab.sharding.info", "ModelLayout"): ("tpu_lab.views.sharding", "LayoutView"),
    ("tpu_lab.sharding.plan", "Plan"): ("tpu_lab.views.sharding", "PlanView"),
    ("tpu_lab.sharding.batch_limit", "BatchLimits"): ("tpu_lab.views.sharding",
                                                       "BatchLimitsView"),
    ("tpu_lab.sharding.chooser", "Choice"): ("tpu_lab.views.choice", "ChoiceView"),
    ("tpu_lab.sharding.mesh", "MeshRun"): ("tpu_lab.views.sharding", "MeshRunView"),
    ("tpu_lab.launch.cluster", "Cluster"): ("tpu_lab.views.cluster", "cluster_view"),
    ("tpu_lab.launch.cluster", "ClusterState"): ("tpu_lab.views.cluster", "ClusterView"),
    ("tpu_lab.launch.spmd_result", "SpmdResult"): ("tpu_lab.views.spmd", "SpmdResultView"),
    ("tpu_lab.media.previews", "Preview"): ("tpu_lab.views.preview", "PreviewView"),
    ("tpu_lab.profiler.report", "Profile"): ("tpu_lab.views.profile", "ProfileView"),
    ("tpu_lab.numerics.parity", "ParityReport"): ("tpu_lab.views.parity", "ParityView"),
    ("tpu_lab.estimate.result", "Estimate"): ("tpu_lab.views.estimate", "EstimateView"),
}


def _maker(obj: Any):
    for cls in type(obj).__mro__:
        target = VIEWS.get((cls.__module__, cls.__qualname__))
        if target is not None:
            module, name = target
            return getattr(importlib.import_module(module), name)
    return None


def view(obj: Any, **options: Any) -> View:
    """The view of ``obj`` (a View is its own view; a tensor or a module: its sharding);
    ``options`` go to the view (such as ``name=`` for a tensor's shards, ``estimate=`` for a
    plan's step, ``top=`` for a profile's table)."""
    if isinstance(obj, View):
        return obj
    maker = _maker(obj)
    if maker is None and _drawn_as_sharding(obj):
        from .sharding import view as sharding_view

        return sharding_view(obj, **options)
    if maker is None:
        drawn = ", ".join(sorted(name for _, name in VIEWS))
        raise TpuLabError(
            f"tpu_lab has no picture of a {type(obj).__name__}; it draws {drawn}, and tensors "
            "and modules as their sharding (tpu_lab.preview draws images)."
        )
    return maker(obj, **options)


#: Types :func:`view` draws as their sharding (a tensor's shards, a module's placement table),
#: though IPython's formatters leave them as they are (they are not in :data:`VIEWS`).
SHARDING_OF = (("torch", "Tensor"), ("torch.nn.modules.module", "Module"))


def _drawn_as_sharding(obj: Any) -> bool:
    return any((c.__module__, c.__qualname__) in SHARDING_OF for c in type(obj).__mro__)


def _bundle(obj: Any) -> dict[str, str]:
    return view(obj)._repr_mimebundle_()


def register_formatters(shell) -> None:
    """Have ``shell`` display every data object of :data:`VIEWS` as its view (idempotent)."""
    formatter = shell.display_formatter.mimebundle_formatter
    for module, name in VIEWS:
        formatter.for_type_by_name(module, name, _bundle)
