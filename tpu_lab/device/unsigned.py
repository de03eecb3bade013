"""uint16/uint32 ops in ``torch.compile(backend="tpu")`` graphs, as eager "tpu" ops run them.

Eager "tpu" ops that PyTorch's CPU kernels refuse for uint16/uint32 run in int64 and are cast
back by the compiled core (``csrc/unsigned.cpp``): results wrap as a TPU's unsigned arithmetic
does. A compiled graph runs on the CPU without that core, so the same ops are decomposed when
the graph is traced: on int64 copies of their unsigned arguments, the result cast to the dtype
PyTorch's type promotion gives it. Other dtypes get the decomposition the graph's lowering had
for the op, if any, else none. Covered: ``arange``, the scans and the ops below, whose CPU
kernels lack these dtypes (Inductor generates its own code for most others). A graph run as ATen ops
(``TPU_LAB_COMPILE_LOWERING=aten``) meets every other refusal too (sums, maxima, cumulative
sums...): :func:`runner` runs such a graph node by node and widens each op the CPU refuses.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.utils._pytree import tree_leaves, tree_map

aten = torch.ops.aten
UNSIGNED = (torch.uint16, torch.uint32)

OPS = (
    aten.pow.Scalar,
    aten.pow.Tensor_Scalar,
    aten.pow.Tensor_Tensor,
    aten.bitwise_left_shift.Tensor,
    aten.bitwise_left_shift.Tensor_Scalar,
    aten.bitwise_right_shift.Tensor,
    aten.bitwise_right_shift.Tensor_Scalar,
    aten.__lshift__.Tensor,
    aten.__lshift__.Scalar,
    aten.__rshift__.Tensor,
    aten.__rshift__.Scalar,
)


def _widened(op, previous):
    def decomposition(*args, **kwargs):
        if not any(isinstance(a, torch.Tensor) and a.dtype in UNSIGNED for a in args):
            return NotImplemented if previous is None else previous(*args, **kwargs)
        wanted = torch.result_type(args[0], args[1])  # each op here is binary, promoting
        wide = [a.to(torch.int64) if isinstance(a, torch.Tensor) and a.dtype in UNSIGNED else a
                for a in args]  # fmt: skip
        return op(*wide, **kwargs).to(wanted)

    return decomposition


#: Factories with a ``dtype`` argument: an unsigned ``arange`` is built in int64 and cast.
FACTORIES = (aten.arange.default, aten.arange.start, aten.arange.start_step)


def _widened_factory(op, previous):
    def decomposition(*args, dtype=None, **kwargs):
        if dtype not in UNSIGNED:
            if previous is None:
                return NotImplemented
            return previous(*args, dtype=dtype, **kwargs)
        return op(*args, dtype=torch.int64, **kwargs).to(dtype)

    return decomposition


#: Scans with a ``dtype`` argument, which Inductor leaves to their CPU kernels: an unsigned
#: one runs in int64, cast to the given dtype (else int64, as PyTorch promotes integers).
SCANS = (aten.cumsum.default, aten.cumprod.default)


def _widened_scan(op, previous):
    def decomposition(self, dim, *, dtype=None):
        if self.dtype not in UNSIGNED and dtype not in UNSIGNED:
            return NotImplemented if previous is None else previous(self, dim, dtype=dtype)
        return op(self.to(torch.int64), dim, dtype=torch.int64).to(dtype or torch.int64)

    return decomposition


def decompositions(base: dict) -> dict:
    """``base`` (a decomposition table for ``aot_autograd``) with these ops widened."""
    widened = {op: _widened(op, base.get(op)) for op in OPS}
    widened.update({op: _widened_factory(op, base.get(op)) for op in FACTORIES})
    widened.update({op: _widened_scan(op, base.get(op)) for op in SCANS})
    return {**base, **widened}


def _is_unsigned(value) -> bool:
    return isinstance(value, torch.Tensor) and value.dtype in UNSIGNED


def _is_unsigned_dtype(value) -> bool:
    return isinstance(value, torch.dtype) and value in UNSIGNED


def _widen(value):
    if _is_unsigned(value):
        return value.to(torch.int64)
    return torch.int64 if _is_unsigned_dtype(value) else value


def _cast(value, like):
    if isinstance(value, torch.Tensor) and isinstance(like, torch.Tensor):
        return value if value.dtype == like.dtype else value.to(like.dtype)
    return value


class _Widening(torch.fx.Interpreter):
    """Runs an ATen graph; an op the CPU refuses for uint16/uint32 runs on int64 copies of its
    unsigned arguments (an unsigned ``dtype=`` asks for int64), each result cast to the dtype
    the graph traced for it: the low bits, as csrc/unsigned.cpp keeps them for eager ops."""

    def run_node(self, n: torch.fx.Node):
        try:
            return super().run_node(n)
        except NotImplementedError:
            args, kwargs = self.fetch_args_kwargs_from_env(n)
            leaves = tree_leaves((args, kwargs))
            unsigned = any(_is_unsigned(a) or _is_unsigned_dtype(a) for a in leaves)
            if n.op != "call_function" or "val" not in n.meta or not unsigned:
                raise
        out = n.target(*tree_map(_widen, args), **tree_map(_widen, kwargs))
        if isinstance(out, (tuple, list)):
            return type(out)(_cast(o, v) for o, v in zip(out, n.meta["val"], strict=True))
        return _cast(out, n.meta["val"])


def runner(gm: torch.fx.GraphModule) -> Callable[[list], object]:
    """How an ATen graph runs on the CPU: as is, or through :class:`_Widening` where it holds
    uint16/uint32 values (a graph without them pays nothing)."""
    if not any(_holds_unsigned(n.meta.get("val")) for n in gm.graph.nodes):
        return lambda args: gm(*args)
    interpreter = _Widening(gm)
    return lambda args: interpreter.run(*args)


def _holds_unsigned(value) -> bool:
    if isinstance(value, (tuple, list)):
        return any(_holds_unsigned(v) for v in value)
    return _is_unsigned(value)
