"""A recorded program at another size, from two recordings of it at two sizes.

A transformer step recorded with a batch of 2 and of 3 runs the same ops on the same values;
what differs is sizes: the batch dimension, a flattened ``batch x seq``, a buffer's bytes,
each an affine function of the batch. :func:`between` reads those functions off the two
recordings and writes the program at any other batch, leaf by leaf: every whole number that
differs moves along its line, everything else must be equal. Where the two recordings differ
in anything else (another op, another number of ops, a float argument, a size that would not
be whole) there is no such program and it returns None: the caller records the step itself.

The caller checks a third recording against the line before it trusts it
(:mod:`tpu_lab.sharding.step_estimate`); tests/test_choose.py compares programs made this way
with recordings at the same batch, op by op.
"""

from __future__ import annotations

import dataclasses

from .ops import OpSignature, TensorSpec
from .trace import Buffer, Program, Record, Value


class _NotAffineError(Exception):
    """The two recordings differ in more than sizes."""


def _mix(u, v, k: int, d: int):
    """The leaf (or tuple of leaves) ``k/d`` of the way on from ``u`` to ``v``."""
    if type(u) is not type(v):
        raise _NotAffineError
    if u == v:
        return u
    if isinstance(u, TensorSpec):
        if u.dtype != v.dtype:
            raise _NotAffineError
        return TensorSpec(_mix(u.shape, v.shape, k, d), u.dtype, _mix(u.elements, v.elements, k, d))
    if isinstance(u, tuple):
        if len(u) != len(v):
            raise _NotAffineError
        return tuple(_mix(a, b, k, d) for a, b in zip(u, v, strict=True))
    if isinstance(u, int) and not isinstance(u, bool):
        step, rest = divmod((v - u) * k, d)
        if rest or u + step < 0:
            raise _NotAffineError
        return u + step
    raise _NotAffineError


def _signature(a: OpSignature, b: OpSignature, k: int, d: int) -> OpSignature:
    if a.func is not b.func:
        raise _NotAffineError
    return OpSignature(a.func, _mix(a.args, b.args, k, d), _mix(a.kwargs, b.kwargs, k, d),
                       _mix(a.outputs, b.outputs, k, d))


def _record(a: Record, b: Record, k: int, d: int) -> Record:
    if (a.ins, a.outs, a.share, a.collective, a.scale) != (b.ins, b.outs, b.share, b.collective,
                                                           b.scale) or a.sig is None:
        raise _NotAffineError
    return dataclasses.replace(a, sig=_signature(a.sig, b.sig, k, d))


def _value(a: Value, b: Value, k: int, d: int) -> Value:
    if (a.base, a.share, a.partial, a.buffer) != (b.base, b.share, b.partial, b.buffer):
        raise _NotAffineError
    return dataclasses.replace(a, spec=_mix(a.spec, b.spec, k, d))


def _buffer(a: Buffer, b: Buffer, k: int, d: int) -> Buffer:
    if (a.made, a.value, a.freed, a.kind, a.scale) != (b.made, b.value, b.freed, b.kind,
                                                       b.scale):
        raise _NotAffineError
    return dataclasses.replace(a, nbytes=_mix(a.nbytes, b.nbytes, k, d))


def between(a: Program, b: Program, at_a: int, at_b: int, at: int) -> Program | None:
    """The program at size ``at``, from ``a`` recorded at ``at_a`` and ``b`` at ``at_b``
    (``at_a != at_b``); None where the two differ in more than sizes that move along a line
    (see the module's docstring)."""
    if at_a == at_b:
        raise ValueError("between() needs recordings at two different sizes.")
    k, d = at - at_a, at_b - at_a
    if len(a.records) != len(b.records) or a.values.keys() != b.values.keys() or len(
            a.buffers) != len(b.buffers):
        return None
    try:
        return Program([_record(x, y, k, d) for x, y in zip(a.records, b.records, strict=True)],
                       {v: _value(a.values[v], b.values[v], k, d) for v in a.values},
                       [_buffer(x, y, k, d) for x, y in zip(a.buffers, b.buffers, strict=True)])
    except _NotAffineError:
        return None
