"""uint16/uint32 ops in ``torch.compile(backend="tpu")`` graphs, as eager "tpu" ops run them.

Eager "tpu" ops that PyTorch's CPU kernels refuse for uint16/uint32 run in int64 and are cast
back by the compiled core (``csrc/unsigned.cpp``): results wrap as a TPU's unsigned arithmetic
does. A compiled graph runs on the CPU without that core, so the same ops are decomposed when
the graph is traced: on int64 copies of their unsigned arguments, the result cast to the dtype
PyTorch's type promotion gives it. Other dtypes get the decomposition the graph's lowering had
for the op, if any, else none. Covered: ``arange`` and the ops below, whose CPU kernels lack
these dtypes (Inductor generates its own code for most others).
"""

from __future__ import annotations

import torch

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


def decompositions(base: dict) -> dict:
    """``base`` (a decomposition table for ``aot_autograd``) with these ops widened."""
    widened = {op: _widened(op, base.get(op)) for op in OPS}
    widened.update({op: _widened_factory(op, base.get(op)) for op in FACTORIES})
    return {**base, **widened}
