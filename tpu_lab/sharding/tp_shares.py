"""What one chip does of each op under tensor parallelism, from the parameters a plan splits.

A program recorded on the unsharded model says what the whole mesh computes. Given the share
of each parameter one chip holds (``1/tp`` for a split weight, 1 for a replicated one), each
value gets a share too, op by op, the way Megatron-style tensor parallelism (transformers'
and diffusers' ``tp_plan`` styles, torch's ``ColwiseParallel``/``RowwiseParallel``) runs:

- a matmul (``mm``, ``bmm``, ``addmm``, ``baddbmm``, a convolution) with one split operand makes
  a split result: each chip computes its part (the column-parallel layer, and the backward of a
  row-parallel one);
- a matmul with both operands split contracts over the split dimension: each chip holds a
  full-size partial sum, and the next op that reads it first waits for an all-reduce (the
  row-parallel layer, and the backward of a column-parallel one);
- an embedding lookup into a split table makes a partial sum the same way (vocab-parallel);
- attention and every other op make results split like their inputs; an op whose inputs are
  all whole runs whole on every chip (norms, residual adds, the loss on replicated values);
- a matmul with a weight whose style gathers its output (transformers' ``colwise_rep`` and
  ``colwise_gather_output``, as its plans split the LM head) makes a split result that an
  all-gather makes whole on every chip: what follows (the logits, the loss) runs whole; in the
  backward each chip takes its slice of that output's gradient (the all-gather's backward),
  so the matmuls that read the gradient with the weight, or for the weight's gradient, are
  split as a column-parallel layer's backward is.

The small all-reduces a vocab-parallel loss would need for its maximum and sum are not counted.
"""

from __future__ import annotations

import torch

from ..estimate.ops import is_view, op_numbers
from ..estimate.trace import Program, Record

aten = torch.ops.aten

#: The two matrix operands of each matmul op (argument positions among its tensor inputs).
MATMUL_OPERANDS = {
    aten.mm: (0, 1), aten.bmm: (0, 1), aten.addmm: (1, 2), aten.baddbmm: (1, 2),
    aten.convolution: (0, 1), aten._convolution: (0, 1),
}
#: Lookups into a table (argument 0) whose result is a partial sum when the table is split.
LOOKUPS = {aten.embedding}


def _sliced(program: Program, gathered: frozenset[int], backward_at: int | None) -> set[int]:
    """The values (bases) of the gradients of gathered outputs: in the backward, what a
    matmul reads beside a weight in ``gathered``; each chip reads its slice of them."""
    if backward_at is None or not gathered:
        return set()
    values, found = program.values, set()
    for r in program.records[backward_at:]:
        packet = getattr(r.sig.func, "_overloadpacket", None) if r.sig is not None else None
        operands = MATMUL_OPERANDS.get(packet)
        if operands is None or len(r.ins) <= max(operands):
            continue
        bases = [values[r.ins[i]].base for i in operands]
        if any(b in gathered for b in bases):
            found.update(b for b in bases if b not in gathered)
    return found


def split(program: Program, tp: int, chip, gathered: frozenset[int] = frozenset(),
          backward_at: int | None = None) -> Program:
    """``program`` with each value's and op's share set for ``tp``-way tensor parallelism (the
    parameters' shares must already be set) and an all-reduce before each read of a partial
    sum; the outputs of matmuls with a weight in ``gathered`` (values) gathered whole after
    them, their gradients sliced in the backward (from record ``backward_at`` on). Returns a
    new program over the same values."""
    from ..estimate.assumed import assumptions

    a = assumptions()
    values = program.values
    sliced = _sliced(program, gathered, backward_at)
    out = Program(values=values, buffers=program.buffers)
    partial: set[int] = set()

    def reduce(v: int) -> None:
        base = values[v].base
        if base in partial:
            out.records.append(Record(None, (v,), (), collective=(
                "all_reduce", tp, "ici", values[v].nbytes)))
            partial.discard(base)

    for r in program.records:
        if r.sig is None:
            out.records.append(r)
            continue
        func = r.sig.func
        shares = [1 / tp if values[v].base in sliced else values[v].share for v in r.ins]
        packet = getattr(func, "_overloadpacket", None)
        if is_view(func):
            share = shares[0] if shares else 1.0
            for v in r.outs:
                values[v].share = share
            out.records.append(r)
            continue
        for v in r.ins:
            reduce(v)
        makes_partial = gathers = False
        if packet in MATMUL_OPERANDS and len(shares) > max(MATMUL_OPERANDS[packet]):
            x, w = (shares[i] for i in MATMUL_OPERANDS[packet])
            share = min(x, w)
            makes_partial = x < 1 and w < 1
            gathers = not makes_partial and share < 1 and any(
                values[v].base in gathered for v in r.ins)
        elif packet in LOOKUPS and shares and shares[0] < 1:
            share, makes_partial = shares[0], True
        elif op_numbers(r.sig, chip, a).flops and shares:
            share = shares[0]
        else:
            share = min(shares, default=1.0)
        if str(packet).startswith("aten._foreach_"):
            for k, v in enumerate(r.outs):
                values[v].share = shares[k] if k < len(shares) else 1.0
            out.records.append(Record(r.sig, r.ins, r.outs, 1.0, None, r.scale))
            continue
        for v in r.outs:
            values[v].share = 1.0 if makes_partial or gathers else share
            if makes_partial:
                partial.add(values[v].base)
        out.records.append(Record(r.sig, r.ins, r.outs, share, None, r.scale))
        if gathers:
            out.records += [Record(None, (v,), (), collective=(
                "all_gather", tp, "ici", values[v].nbytes)) for v in r.outs]
    for v in sorted(partial):
        out.records.append(Record(None, (v,), (), collective=(
            "all_reduce", tp, "ici", values[v].nbytes)))
    return out
