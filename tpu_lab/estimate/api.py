"""Estimating what you have: one op, a function's ops, an FX graph.

- :func:`op_cost` is the per-op pure function a device calls on each eager op: from an
  :class:`~tpu_lab.estimate.ops.OpSignature` (recorded from real, fake or meta tensors, or
  built from (shape, dtype) pairs) to an :class:`~tpu_lab.estimate.result.OpCost`, cached per
  signature, chip and assumptions.
- :func:`estimate` runs a function once under a recorder and costs its ops (eager) or its
  graph (fused); :func:`estimate_graph` costs an FX graph (a ``torch.compile`` backend's)
  from each node's ``meta["val"]``.
"""

from __future__ import annotations

import torch

from ..errors import TpuLabError
from ..hardware.chips import CHIPS, Chip
from .assumed import assumptions, version
from .graph import cost, eager_op
from .memory import classify
from .ops import OpSignature, is_view, op_numbers
from .result import Estimate, OpCost
from .trace import Recorder, from_graph, is_aten_graph, to_aten


def chip(which: str | Chip) -> Chip:
    """A :class:`Chip` by generation name ("v6e"; a topology such as "v6e-4" names its
    generation), or the chip itself; a v7 name gives one of its two devices."""
    if isinstance(which, Chip):
        return which
    found = _BY_NAME.get(which)
    if found is None:
        from ..hardware.topology import GENERATIONS

        name = str(which).strip().lower().split("-")[0].removeprefix("tpu").strip()
        gen = GENERATIONS.get(name)
        if gen is None:
            raise TpuLabError(f"Unknown TPU generation {which!r}; known: {', '.join(CHIPS)}.")
        found = _BY_NAME[which] = gen.device
    return found


_BY_NAME: dict[str, Chip] = {}
_COSTS: dict[tuple, OpCost] = {}


def op_cost(sig: OpSignature, on: str | Chip = "v6e", *, launch: bool = True) -> OpCost:
    """The cost of one op on an idealised ``on`` chip: the larger of its MXU time and HBM
    time, plus the eager launch (``launch=False``: the op inside a graph). Views cost
    nothing. Cached per signature, chip and set of assumptions (a dictionary look-up when
    seen before: this is the function a device calls per eager op)."""
    memo, changes = sig.cost, version()
    if memo is not None and memo[0] is on and memo[1] == changes and memo[2] is launch:
        return memo[3]
    key = (sig, on, changes, launch)
    found = _COSTS.get(key)
    if found is None:
        if len(_COSTS) > 1 << 16:
            _COSTS.clear()
        c, a = chip(on), assumptions()
        found = _COSTS[key] = eager_op(sig, op_numbers(sig, c, a), c, a,
                                       launch=launch and not is_view(sig.func))
    sig.cost = (on, changes, launch, found)
    return found


def estimate(fn, *args, on: str | Chip = "v6e", chips: int = 1, mode: str = "compiled",
             title: str = "", **kwargs) -> Estimate:
    """Run ``fn(*args, **kwargs)`` once (on whatever tensors it gets: meta tensors cost
    nothing to run) and estimate its ops on one ``on`` chip: op by op (``mode="eager"``) or
    as one fused graph ("fuse", "compiled"); with its peak HBM (``.memory``: the tensors that
    existed before as inputs, what it makes as temporaries)."""
    rec = Recorder()
    with rec:
        fn(*args, **kwargs)
    classify(rec.program, None)
    name = title or getattr(fn, "__name__", type(fn).__name__)
    return cost(rec.program, chip(on), mode, chips=chips, title=name)


def estimate_graph(gm: torch.fx.GraphModule, on: str | Chip = "v6e", *, chips: int = 1,
                   mode: str = "compiled", title: str = "graph") -> Estimate:
    """Estimate an FX graph: an aten graph from its nodes' ``meta["val"]`` directly, a
    Dynamo (torch-level) graph after tracing it to aten ops on fake tensors."""
    if not is_aten_graph(gm):
        gm = to_aten(gm)
    return cost(from_graph(gm), chip(on), mode, chips=chips, title=title)
