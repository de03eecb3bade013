"""Estimates of what the "tpu" device ran: the ops it recorded while a block asked.

``with tpu_lab.estimating() as r: ...`` (or ``Device.estimating()``) switches the
compiled core's op log on for this thread (``device/core/csrc/oplog.cpp``): each op the device
runs is kept as its schema, its other arguments, and each tensor's shape, strides, dtype and
identity (the tensor's and its storage's, so that in-place ops and views are told apart).
Nothing is converted per op. When the block ends the records become
:class:`~tpu_lab.estimate.ops.OpSignature` s, split the way the device ran them, and
``r.estimate()`` costs them (once per chip, when first asked) on an idealised chip of the
simulated generation:

- ops run in ``DEFER_NEVER`` (and ``..._AND_LAUNCH_BLOCKING``): op by op, each its own program,
  as ``estimate(fn, mode="eager")`` costs them (:func:`~tpu_lab.estimate.op_cost` per op);
- the ops of one ``DEFER_AND_FUSE`` graph (between two sync points): one fused graph ("fuse");
- each call of a ``torch.compile(backend="tpu")`` graph: that graph's
  :func:`~tpu_lab.estimate.estimate_graph` ("compiled"), worked out once per compiled graph
  and chip and counted per call.

A block keeps its first 100,000 ops in order; beyond them the core only counts each
signature's ops and each compiled graph's calls, and they are costed op by op (eager) and
graph by graph, so that a long block costs little to record and to estimate.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import NamedTuple

import torch

from ..hardware.chips import Chip
from .api import chip as chip_of
from .api import op_cost
from .assumed import version
from .graph import cost
from .ops import OpSignature, TensorSpec, freeze
from .result import Estimate, merged
from .trace import Program, Record, from_graph, is_aten_graph, to_aten

#: Kinds of the marks Python puts into the core's log.
GRAPH_ENDS, COMPILED_GRAPH = 0, 1


class Leaf(NamedTuple):
    """A tensor of a recorded signature: its position among the op's tensors (schema order,
    arguments then results; the core gives their identities in that order) and its spec."""

    position: int
    spec: TensorSpec


def _leaf(position: int, shape: tuple, stride: tuple, dtype: torch.dtype) -> Leaf:
    """As :func:`tpu_lab.estimate.ops.spec` reads a tensor (an expanded one holds fewer)."""
    held = math.prod(shape)
    if 0 in stride and held:
        held = math.prod(size for size, step in zip(shape, stride, strict=True) if step)
    return Leaf(position, TensorSpec(torch.Size(shape), dtype, held))


def _freeze(x):
    if isinstance(x, Leaf):
        return x.spec
    if isinstance(x, (list, tuple)):
        return tuple(_freeze(i) for i in x)
    return freeze(x)


def _leaves(args: tuple, kwargs: dict) -> list[Leaf]:
    """The tensors among an op's arguments, in :func:`tpu_lab.estimate.trace.tensor_leaves`
    order."""
    out: list[Leaf] = []

    def walk(x) -> None:
        if isinstance(x, Leaf):
            out.append(x)
        elif isinstance(x, (list, tuple)):
            for i in x:
                walk(i)

    walk(args)
    for _, v in sorted(kwargs.items()):
        walk(v)
    return out


def _written(func, args: tuple, kwargs: dict, out) -> list[Leaf]:
    """As :func:`tpu_lab.estimate.ops.written`: the tensors returned, else those updated."""
    items = (out,) if isinstance(out, Leaf) or not isinstance(out, (tuple, list)) else out
    outs = [t for t in items if isinstance(t, Leaf)]
    if outs:
        return outs
    mutated = []
    for i, arg in enumerate(func._schema.arguments):
        if arg.alias_info is None or not arg.alias_info.is_write:
            continue
        value = args[i] if i < len(args) else kwargs.get(arg.name)
        items = value if isinstance(value, (list, tuple)) else (value,)
        mutated += [t for t in items if isinstance(t, Leaf)]
    return mutated


_FUNCS: dict[tuple[str, str, str], object] = {}


def _func(which: tuple[str, str, str]):
    """The OpOverload of (namespace, name, overload)."""
    found = _FUNCS.get(which)
    if found is None:
        namespace, name, overload = which
        packet = getattr(getattr(torch.ops, namespace), name)
        found = _FUNCS[which] = getattr(packet, overload or "default")
    return found


class _Signed(NamedTuple):
    """A distinct recorded signature, and where its read and written tensors are among the
    op's tensors."""

    sig: OpSignature
    reads: tuple[Leaf, ...]
    writes: tuple[Leaf, ...]


def _signed(which, args: tuple, kwargs: dict, results: tuple) -> _Signed:
    func = _func(which)
    out = results[0] if len(results) == 1 else results
    written = _written(func, args, kwargs, out)
    sig = OpSignature(
        func, tuple([_freeze(a) for a in args]),
        tuple(sorted((k, _freeze(v)) for k, v in kwargs.items())) if kwargs else (),
        (out.spec,) if isinstance(out, Leaf) else tuple(t.spec for t in written),
    )
    return _Signed(sig, tuple(_leaves(args, kwargs)), tuple(written))


class _Builder:
    """Records into a :class:`~tpu_lab.estimate.trace.Program`: a tensor is the value it was
    last written as; a tensor first seen as an input is a view of the value its storage was
    first seen in; an op's output on an input's storage (in place, ``out=``) a view of it.
    """

    def __init__(self) -> None:
        self.program = Program()
        self.ids: dict[int, int] = {}
        self.bases: dict[int, int] = {}

    def add(self, signed: _Signed, ids: tuple[int, ...]) -> None:
        program, values = self.program, self.program.values
        ins, on = [], {}
        for leaf in signed.reads:
            impl, storage = ids[2 * leaf.position], ids[2 * leaf.position + 1]
            vid = self.ids.get(impl)
            if vid is None or values[vid].spec != leaf.spec:
                vid = program.new_value(leaf.spec, self.bases.get(storage))
                self.ids[impl] = vid
                self.bases.setdefault(storage, vid)
            ins.append(vid)
            on[storage] = vid
        outs = []
        for leaf in signed.writes:
            impl, storage = ids[2 * leaf.position], ids[2 * leaf.position + 1]
            vid = program.new_value(leaf.spec, on.get(storage))
            self.ids[impl] = vid
            if storage not in on:
                self.bases[storage] = vid
            outs.append(vid)
        program.records.append(Record(signed.sig, tuple(ins), tuple(outs)))


class _Alone:
    """Eager ops into a :class:`~tpu_lab.estimate.trace.Program`: each op is a program of its
    own, costed from its signature alone, so every tensor is one value."""

    def __init__(self) -> None:
        self.program = Program()
        self.program.new_value(TensorSpec((), torch.float32, 0))

    def add(self, signed: _Signed, ids: tuple[int, ...]) -> None:
        self.program.records.append(Record(signed.sig, (0,) * len(signed.reads),
                                           (0,) * len(signed.writes)))


def _hint(x):
    """``x`` with each symbolic size replaced by the value it had when the graph was traced."""
    if isinstance(x, torch.SymInt):
        return x.node.hint
    if isinstance(x, TensorSpec):
        return TensorSpec(torch.Size([_hint(d) for d in x.shape]), x.dtype, _hint(x.elements))
    if isinstance(x, tuple):
        return tuple(_hint(i) for i in x)
    return x


def _symbolic(x) -> bool:
    if isinstance(x, torch.SymInt):
        return True
    if isinstance(x, tuple):  # TensorSpec, shapes, frozen arguments
        return any(_symbolic(i) for i in x)
    return False


def _at_traced_sizes(program: Program) -> bool:
    """Give a graph traced with dynamic shapes the sizes of its trace (in place); whether it
    had any."""
    found = False
    for value in program.values.values():
        if _symbolic(value.spec):
            value.spec, found = _hint(value.spec), True
    for record in program.records:
        sig = record.sig
        if sig is not None and _symbolic((sig.args, sig.kwargs, sig.outputs)):
            record.sig = OpSignature(sig.func, _hint(sig.args), _hint(sig.kwargs),
                                     _hint(sig.outputs))
            found = True
    return found


@dataclass
class CompiledGraph:
    """A graph the "tpu" compile backend compiled, read as :func:`estimate_graph` reads it
    (before the CPU's compiler rewrites it); its estimate is worked out once per chip and set
    of assumptions, when an estimate first asks for it. A graph with dynamic shapes is costed
    at the sizes it was traced with, and its estimate says so."""

    program: Program
    title: str
    notes: tuple[str, ...] = ()
    _costs: dict = field(default_factory=dict, repr=False)

    @classmethod
    def of(cls, gm: torch.fx.GraphModule, title: str) -> CompiledGraph:
        program = from_graph(gm if is_aten_graph(gm) else to_aten(gm))
        notes = ()
        if _at_traced_sizes(program):
            notes = (f"{title} has dynamic shapes: costed at the sizes it was traced with",)
        return cls(program, title, notes)

    def estimate(self, on: Chip) -> Estimate:
        key = (on, version())
        found = self._costs.get(key)
        if found is None:
            found = self._costs[key] = cost(self.program, on, "compiled", title=self.title,
                                            notes=self.notes)
        return found


class Step(NamedTuple):
    """One step of the estimated timeline: an op, a fused graph or a compiled graph's call,
    in seconds from the start on the idealised chip."""

    name: str
    start: float
    seconds: float
    bound: str


class Recording:
    """What the device ran inside an :func:`estimating` block (filled when the block ends)."""

    def __init__(self, device, on: Chip, title: str) -> None:
        self._device, self.chip, self.title = device, on, title
        self.eager = Program()
        self.graphs: list[Program] = []
        self.calls: list[CompiledGraph] = []
        self.order: list[tuple[str, int]] = []  # ("op", record) / ("fuse", i) / ("compiled", i)
        #: Beyond the ops kept in order: ops counted per signature, calls per compiled graph.
        self.counted: list[tuple[_Signed, int]] = []
        self.counted_calls: list[tuple[CompiledGraph, int]] = []
        self._estimates: dict[tuple, Estimate] = {}  # per chip and set of assumptions

    @property
    def ops(self) -> int:
        """Ops recorded (compiled graphs' calls count one each)."""
        return (len(self.eager.records) + sum(len(g.records) for g in self.graphs)
                + len(self.calls) + sum(n for _, n in self.counted)
                + sum(n for _, n in self.counted_calls))

    def _take(self, log: tuple[list, list, list, dict]) -> None:
        signatures, records, counted, calls = log
        signed = [_signed(*s) for s in signatures]
        self.counted = [(signed[i], n) for i, n in enumerate(counted) if n]
        self.counted_calls = [(self._device.compiled[tag], n) for tag, n in sorted(calls.items())]
        eager, fused = _Alone(), None
        self.eager = eager.program
        for index, in_graph, ids in records:
            if index is None:
                if in_graph == GRAPH_ENDS:
                    fused = None
                else:
                    self.order.append(("compiled", len(self.calls)))
                    self.calls.append(self._device.compiled[ids])
                continue
            if in_graph:
                if fused is None:
                    fused = _Builder()
                    self.order.append(("fuse", len(self.graphs)))
                    self.graphs.append(fused.program)
                fused.add(signed[index], ids)
            else:
                fused = None
                self.order.append(("op", len(eager.program.records)))
                eager.add(signed[index], ids)

    def estimate(self, on: str | Chip | None = None) -> Estimate:
        """The estimate of everything recorded, on ``on`` (default: the simulated chip)."""
        c = self.chip if on is None else chip_of(on)
        key = (c, version())
        found = self._estimates.get(key)
        if found is None:
            parts = []
            if self.eager.records:
                parts.append(cost(self.eager, c, "eager"))
            parts += [cost(g, c, "fuse") for g in self.graphs]
            parts += [g.estimate(c) for g in self.calls]
            more, weights = self._counted(c)
            found = self._estimates[key] = combine(parts + more, c, self.title,
                                                   [1] * len(parts) + weights)
        return found

    def _counted(self, c: Chip) -> tuple[list[Estimate], list[int]]:
        """The estimates of the counted ops (one op of each signature) and compiled graphs'
        calls, and how many times each ran."""
        parts, weights = [], []
        for signed, n in self.counted:
            alone = _Alone()
            alone.add(signed, ())
            parts.append(cost(alone.program, c, "eager"))
            weights.append(n)
        for graph, n in self.counted_calls:
            parts.append(graph.estimate(c))
            weights.append(n)
        return parts, weights

    def timeline(self, on: str | Chip | None = None) -> list[Step]:
        """The recorded work one after another on the idealised chip: each eager op (its
        :func:`~tpu_lab.estimate.op_cost`), each fused graph, each compiled graph's call."""
        c = self.chip if on is None else chip_of(on)
        steps, at = [], 0.0
        for kind, i in self.order:
            if kind == "op":
                o = op_cost(self.eager.records[i].sig, c)
                name = o.name
            elif kind == "fuse":
                o = cost(self.graphs[i], c, "fuse")
                name = f"fused graph ({len(self.graphs[i].records)} ops)"
            else:
                o = self.calls[i].estimate(c)
                name = self.calls[i].title
            if o.seconds:
                steps.append(Step(name, at, o.seconds, o.bound))
            at += o.seconds
        more, weights = self._counted(c)
        if more:
            rest = combine(more, c, "", weights)
            steps.append(Step(f"{sum(weights):,} more ops, counted", at, rest.seconds, rest.bound))
        return steps


def combine(parts: list[Estimate], on: Chip, title: str,
            weights: list[int] | None = None) -> Estimate:
    """Estimates run one after another (``weights[i]`` times each, default once), as one (a
    single part run once: itself, retitled)."""
    weights = weights or [1] * len(parts)
    if len(parts) == 1 and weights[0] == 1:
        return replace(parts[0], title=title)
    ops = [o.times(w) for p, w in zip(parts, weights, strict=True) for o in p.ops]
    total = {f: sum(getattr(p, f) * w for p, w in zip(parts, weights, strict=True)) for f in (
        "seconds", "flops", "padded_flops", "hbm_bytes", "ici_bytes", "dcn_bytes",
        "compute_seconds", "memory_seconds", "collective_seconds", "launch_seconds",
        "expected_seconds")}
    shares = {"compute": 0.0, "memory": 0.0, "collective": total["collective_seconds"],
              "launch": total["launch_seconds"]}
    for o in ops:
        if o.kind not in ("collective", "launch"):
            shares["compute" if o.bound == "compute" else "memory"] += o.busy_seconds
    modes = sorted({p.mode for p in parts}, key=("eager", "fuse", "compiled").index)
    notes = tuple(dict.fromkeys(n for p in parts for n in p.notes))
    return Estimate(title=title, chip=on, chips=1, mode="+".join(modes) or "eager",
                    bound=max(shares, key=shares.get), ops=merged(ops), notes=notes, **total)


@contextlib.contextmanager
def estimating(device, on: str | Chip | None = None, title: str = "block") -> Iterator[Recording]:
    """Record what ``device`` runs in this thread inside the block (and on autograd's "tpu"
    thread, where ``backward()`` runs); the :class:`Recording` it yields is filled when the
    block ends (also when it raises). An unknown ``on`` is refused before the block runs."""
    c = chip_of(device.chip.topology.generation.name if on is None else on)
    recording = Recording(device, c, title)
    start = device.core.op_log_begin()
    try:
        yield recording
    finally:
        recording._take(device.core.op_log_end(start, _leaf))
