"""A program as an estimate reads it: the ops in order, and which tensor each one reads and
writes (so that a fused graph can tell intermediates from traffic).

:class:`Recorder` is a dispatch mode that records every aten op run under it (on meta, fake or
real tensors). :func:`from_graph` reads the same from an FX graph's ``node.meta["val"]``.
Values are numbered; an op that writes a tensor in place makes a new value; a view is a value
whose ``base`` is the value it looks into.
"""

from __future__ import annotations

import operator
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
class Program:
    """Ops in program order and the values they read and write."""

    records: list[Record] = field(default_factory=list)
    values: dict[int, Value] = field(default_factory=dict)

    def new_value(self, s: TensorSpec, base: int | None = None) -> int:
        vid = len(self.values)
        self.values[vid] = Value(s, vid if base is None else self.values[base].base)
        return vid


def tensor_leaves(args: tuple, kwargs: dict | None) -> list[torch.Tensor]:
    """The tensors among an op's arguments, in the order :class:`OpSignature` lists them
    (positional arguments depth first, then keyword arguments by name)."""
    out: list[torch.Tensor] = []

    def walk(x) -> None:
        if isinstance(x, torch.Tensor):
            out.append(x)
        elif isinstance(x, (list, tuple)):
            for i in x:
                walk(i)

    walk(args)
    for _, v in sorted((kwargs or {}).items()):
        walk(v)
    return out


class Recorder(TorchDispatchMode):
    """Records every aten op run inside it into its ``program`` (the tensors it saw are kept
    alive until the recorder is dropped, so that their identities stay unique)."""

    def __init__(self) -> None:
        super().__init__()
        self.program = Program()
        self._ids: dict[int, int] = {}
        self._alive: list[torch.Tensor] = []

    def value_of(self, t: torch.Tensor) -> int:
        """The value ``t`` holds now (a new input value the first time it is seen)."""
        vid = self._ids.get(id(t))
        if vid is None:
            vid = self.program.new_value(spec(t))
            self._ids[id(t)] = vid
            self._alive.append(t)
        return vid

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func is torch.ops.prim.device.default:
            return out
        ins = tuple(self.value_of(t) for t in tensor_leaves(args, kwargs))
        outs = written(func, args, kwargs, out)
        view = is_view(func)
        vids = []
        for t in outs:
            base = ins[0] if view and ins else None
            vid = self.program.new_value(spec(t), base)
            self._ids[id(t)] = vid
            self._alive.append(t)
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
