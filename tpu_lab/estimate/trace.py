"""A program as an estimate reads it: the ops in order, which tensor each one reads and writes
(so that a fused graph can tell intermediates from traffic), and, when it was run, the memory
each tensor lived in (so that its peak HBM can be worked out).

:class:`Recorder` is a dispatch mode that records every aten op run under it (on meta, fake or
real tensors). :func:`from_graph` reads the same from an FX graph's ``node.meta["val"]``.
Values are numbered; an op that writes a tensor in place makes a new value; a view is a value
whose ``base`` is the value it looks into. A recorder also keeps the program's
:class:`Buffer` s: each storage a tensor lived in (what a device allocates), the op that made it
and the op before which it was freed, seen as the run let go of it (a storage is freed when its
last tensor is, as on the device).
"""

from __future__ import annotations

import functools
import operator
import weakref
from dataclasses import dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ..errors import TpuLabError
from .ops import OpSignature, TensorSpec, is_view, signature, spec, written


@dataclass
class Value:
    """One tensor value: its size, the value it is a view of (itself if none), and the share
    of it one chip holds (1 unless a plan shards it)."""

    spec: TensorSpec
    base: int
    share: float = 1.0
    partial: bool = False  # a sum of per-chip parts until an all-reduce
    buffer: int = -1  # the program's Buffer it lives in (-1: not known, a graph's value)

    @property
    def nbytes(self) -> int:
        return self.spec.nbytes


@dataclass
class Record:
    """One op: its signature and the values it reads and writes; or a collective (``sig``
    None, ``collective`` = (kind, group size, network, bytes of the whole tensor)) over value
    ``ins[0]``. ``share`` is the part of the op's work one chip does; ``scale`` multiplies all
    of the record's work and traffic (an optimizer step over a ``1/fsdp`` shard)."""

    sig: OpSignature | None
    ins: tuple[int, ...]
    outs: tuple[int, ...]
    share: float = 1.0
    collective: tuple[str, int, str, float] | None = None
    scale: float = 1.0


@dataclass
class Buffer:
    """One storage of a recorded run: ``nbytes``, the record that made it (``made``; -1: it
    existed before the recording began), the record before which it was freed (``freed``;
    None: alive at the end), the value it was first seen as, and what it holds (``kind``:
    "weights", "gradients", "optimizer state", "KV cache", "inputs" as the caller says, ""
    until :mod:`tpu_lab.estimate.memory` classifies it). One chip holds the value's share of
    it, times ``scale``."""

    nbytes: int
    made: int
    value: int
    freed: int | None = None
    kind: str = ""
    scale: float = 1.0  # of the value's share, what one chip holds of it (FSDP: 1/fsdp)


@dataclass
class Program:
    """Ops in program order, the values they read and write, and (for a recorded run) the
    buffers those values lived in."""

    records: list[Record] = field(default_factory=list)
    values: dict[int, Value] = field(default_factory=dict)
    buffers: list[Buffer] = field(default_factory=list)

    def new_value(self, s: TensorSpec, base: int | None = None) -> int:
        vid = len(self.values)
        self.values[vid] = Value(s, vid if base is None else self.values[base].base)
        return vid


def tensor_leaves(args: tuple, kwargs: dict | None) -> list[torch.Tensor]:
    """The tensors among an op's arguments, in the order :class:`OpSignature` lists them
    (positional arguments depth first, then keyword arguments by name)."""
    out: list[torch.Tensor] = []
    _collect(args, out)
    for _, v in sorted((kwargs or {}).items()):
        _collect(v, out)
    return out


def _collect(x, out: list[torch.Tensor]) -> None:
    """The tensors in ``x`` (nested lists and tuples), depth first, into ``out`` (a plain
    function: a closure that calls itself is a reference cycle, which would keep the tensors
    alive past their last use until the garbage collector runs)."""
    if isinstance(x, torch.Tensor):
        out.append(x)
    elif isinstance(x, (list, tuple)):
        for i in x:
            _collect(i, out)


class Recorder(TorchDispatchMode):
    """Records every aten op run inside it into its ``program``, and the storage each tensor
    lives in (:class:`Buffer`): a storage is freed when its last tensor is, and the recorder
    holds no tensor, so each buffer's life is the run's own."""

    def __init__(self) -> None:
        super().__init__()
        self.program = Program()
        #: id(tensor) -> (a weak reference to it, its value); a dead tensor's id may be reused
        #: by a new one, which the reference tells apart.
        self._ids: dict[int, tuple[weakref.ref, int]] = {}
        self._storages: dict[int, tuple[int, weakref.ref]] = {}  # live storage -> buffer

    def hold(self, t: torch.Tensor, kind: str, share: float = 1.0) -> int:
        """Count ``t`` (which exists before the run: a weight, an optimizer state, the KV
        cache, an input) as ``kind``, of which one chip holds ``share``; returns its value."""
        vid = self.value_of(t)
        self.program.values[vid].share = share
        buffer = self.program.values[vid].buffer
        if buffer >= 0 and not self.program.buffers[buffer].kind:
            self.program.buffers[buffer].kind = kind
        return vid

    def value_of(self, t: torch.Tensor) -> int:
        """The value ``t`` holds now (a new input value the first time it is seen)."""
        found = self._ids.get(id(t))
        if found is not None and found[0]() is t:
            return found[1]
        vid = self.program.new_value(spec(t))
        self._ids[id(t)] = (weakref.ref(t), vid)
        self._place(t, vid, made=-1)
        return vid

    def _place(self, t: torch.Tensor, vid: int, made: int) -> None:
        """Note the buffer value ``vid`` (tensor ``t``) lives in: a new one if ``t``'s
        storage is new (made by record ``made``, or before the run: -1)."""
        try:
            storage = t.untyped_storage()
        except (RuntimeError, NotImplementedError):  # a tensor without storage
            return
        key = storage._cdata
        found = self._storages.get(key)
        if found is None:
            index = len(self.program.buffers)
            self.program.buffers.append(Buffer(storage.nbytes(), made, vid))
            found = self._storages[key] = (
                index, weakref.ref(storage, functools.partial(self._freed, key, index)))
        self.program.values[vid].buffer = found[0]

    def _freed(self, key: int, index: int, _ref) -> None:
        buffer = self.program.buffers[index]
        if buffer.freed is None:
            buffer.freed = len(self.program.records)
        self._storages.pop(key, None)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func is torch.ops.prim.device.default:
            return out
        ins = tuple(self.value_of(t) for t in tensor_leaves(args, kwargs))
        outs = written(func, args, kwargs, out)
        view = is_view(func)
        made = len(self.program.records)
        vids = []
        for t in outs:
            base = ins[0] if view and ins else None
            vid = self.program.new_value(spec(t), base)
            self._ids[id(t)] = (weakref.ref(t), vid)
            self._place(t, vid, made)
            vids.append(vid)
        self.program.records.append(Record(signature(func, args, kwargs, out), ins, tuple(vids)))
        return out


def tensor_nodes(node: torch.fx.Node) -> list[torch.fx.Node]:
    """The nodes among ``node``'s arguments in :func:`tensor_leaves` order."""
    found: list[torch.fx.Node] = []

    def keep(n: torch.fx.Node) -> torch.fx.Node:
        found.append(n)
        return n

    torch.fx.node.map_arg((node.args, dict(sorted(node.kwargs.items()))), keep)
    return found


def from_graph(gm: torch.fx.GraphModule) -> Program:
    """The program of an aten-level FX graph (what a compile backend receives after
    AOTAutograd), read from each node's ``meta["val"]``."""
    program = Program()
    ids: dict[str, int] = {}

    def val(node) -> object:
        return node.meta.get("val") if isinstance(node, torch.fx.Node) else node

    def value(node: torch.fx.Node) -> int:
        if node.name not in ids:
            ids[node.name] = program.new_value(spec(node.meta["val"]))
        return ids[node.name]

    for node in gm.graph.nodes:
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
            continue
        args = torch.fx.node.map_arg(node.args, val)
        kwargs = torch.fx.node.map_arg(node.kwargs, val)
        sources = tensor_nodes(node)
        ins = tuple(value(n) for n in sources if isinstance(val(n), torch.Tensor))
        out = node.meta.get("val")
        outs = out if isinstance(out, (tuple, list)) else (out,)
        base = ins[0] if is_view(node.target) and ins else None
        vids = []
        for i, t in enumerate(outs):
            if isinstance(t, torch.Tensor):
                vid = program.new_value(spec(t), base)
                vids.append(vid)
                if len(outs) == 1:
                    ids[node.name] = vid
                else:
                    ids[f"{node.name}[{i}]"] = vid
        program.records.append(Record(signature(node.target, args, kwargs, out), ins,
                                      tuple(vids)))
        for user in node.users:  # getitem of a multi-output op reads its part
            if user.target is operator.getitem and len(outs) > 1:
                ids[user.name] = ids.get(f"{node.name}[{user.args[1]}]", vids[0] if vids else 0)
    return program


def is_aten_graph(gm: torch.fx.GraphModule) -> bool:
    """True when every called function of ``gm`` is an aten op (or a getitem)."""
    return all(isinstance(n.target, torch._ops.OpOverload) or n.target is operator.getitem
               for n in gm.graph.nodes if n.op == "call_function")


def to_aten(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """A torch-level graph (Dynamo's) traced to aten ops on fake tensors of its inputs (what
    :func:`from_graph` reads)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    inputs = [n.meta.get("val", n.meta.get("example_value"))
              for n in gm.graph.nodes if n.op == "placeholder"]
    if any(not isinstance(i, torch.Tensor) for i in inputs):
        raise TpuLabError("estimate_graph needs each placeholder's meta['val'] (a fake tensor),"
                          " as a torch.compile backend receives it.")
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        fakes = [mode.from_tensor(i) for i in inputs]
        return make_fx(gm, tracing_mode="real")(*fakes)
