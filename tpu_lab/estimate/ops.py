"""One op's cost from its signature: FLOPs from PyTorch's own counter, the MXU's padding, HBM
bytes, and its time on an idealised chip.

An op is known by an :class:`OpSignature`: the aten op and, in place of each tensor, a
:class:`TensorSpec` (shape, dtype, and how many elements it really holds: an expanded tensor
holds fewer than it shows). Signatures are hashable, so the device can record them cheaply
(from real, fake or meta tensors, with :func:`signature`) and :func:`op_numbers` caches the
arithmetic per signature.

- FLOPs: ``torch.utils.flop_counter``'s registry of formulas, the ones ``FlopCounterMode``
  uses; an op it has no formula for counts 0 FLOPs (its work is the vector unit's, which an
  idealised chip hides behind its memory traffic). Attention ops that PyTorch runs on other
  devices than CUDA (:data:`FORMULA_OF`) are counted with the formula of the CUDA op that
  computes the same thing.
- MXU padding: the matmuls inside an op (:func:`matmul_dims`) run in tiles of the MXU's side
  (128, or 256 from v6e) on the contracted and output-feature dims and of 8 rows on the other:
  ``padded_flops`` counts the FLOPs of the padded shapes.
- HBM bytes: every tensor the op reads and writes, counted by the elements it holds; ops that
  update part of a tensor (:data:`UPDATES`) move only the part; views move nothing.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import torch

from ..hardware.chips import Chip
from .assumed import Assumptions

aten = torch.ops.aten


class TensorSpec(NamedTuple):
    """A tensor as an estimate sees it: ``elements`` counts what it holds in memory (fewer
    than ``prod(shape)`` for an expanded tensor)."""

    shape: tuple[int, ...]
    dtype: torch.dtype
    elements: int

    @property
    def nbytes(self) -> int:
        return self.elements * _itemsize(self.dtype)


class OpSignature:
    """An op and its arguments with tensors replaced by :class:`TensorSpec`: hashable, its
    hash computed once (a device may look the same signature up many times)."""

    __slots__ = ("_hash", "args", "cost", "func", "kwargs", "outputs")

    def __init__(self, func, args: tuple, kwargs: tuple, outputs: tuple[TensorSpec, ...]):
        self.func, self.args, self.kwargs, self.outputs = func, args, kwargs, outputs
        self._hash = None
        #: The last cost asked of this signature, as (chip, assumptions' version, launch,
        #: cost): :func:`tpu_lab.estimate.op_cost` answers a repeat from it.
        self.cost = None

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash((id(self.func), self.args, self.kwargs, self.outputs))
        return self._hash

    def __eq__(self, other) -> bool:
        return (isinstance(other, OpSignature) and self.func is other.func
                and self.args == other.args and self.kwargs == other.kwargs
                and self.outputs == other.outputs)

    def __repr__(self) -> str:
        return f"OpSignature({self.name}, {self.args!r}, {self.kwargs!r} -> {self.outputs!r})"

    @property
    def name(self) -> str:
        return op_name(self.func)


@functools.cache
def _itemsize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype, device="meta").element_size()


def op_name(func) -> str:
    """``aten.mm`` for ``aten.mm.default``; other ops by their qualified name."""
    packet = getattr(func, "_overloadpacket", None)
    if packet is not None:
        return f"{packet._qualified_op_name.replace('::', '.')}"
    return getattr(func, "__name__", str(func))


_tuple = tuple.__new__


def spec(t: torch.Tensor) -> TensorSpec:
    """The :class:`TensorSpec` of a real, fake or meta tensor."""
    shape, stride = t.shape, t.stride()
    held = t.numel()
    if 0 in stride and held:
        held = math.prod(size for size, step in zip(shape, stride, strict=True) if step)
    return _tuple(TensorSpec, (shape, t.dtype, held))


def freeze(x):
    if isinstance(x, torch.Tensor):
        return spec(x)
    if isinstance(x, (list, tuple)):
        return tuple(freeze(i) for i in x)
    if isinstance(x, (torch.SymInt, torch.SymFloat)):
        return int(x) if isinstance(x, torch.SymInt) else float(x)
    if isinstance(x, (int, float, bool, str, type(None), torch.dtype, torch.device,
                      torch.layout, torch.memory_format)):
        return x
    if isinstance(x, torch.ScriptObject):  # a profiler's handle: the same op whichever it is
        return f"<{type(x).__name__}>"
    return repr(x)


def written(func, args: tuple, kwargs: dict | None, out) -> list[torch.Tensor]:
    """The tensors ``func(*args, **kwargs) -> out`` writes: those it returns, or, for an op
    that returns nothing (``_foreach_add_``), the arguments it updates in place."""
    outs = [t for t in (out if isinstance(out, (tuple, list)) else (out,))
            if isinstance(t, torch.Tensor)]
    if outs or not hasattr(func, "_schema"):
        return outs
    mutated = []
    for i, arg in enumerate(func._schema.arguments):
        if arg.alias_info is None or not arg.alias_info.is_write:
            continue
        value = args[i] if i < len(args) else (kwargs or {}).get(arg.name)
        items = value if isinstance(value, (list, tuple)) else (value,)
        mutated += [t for t in items if isinstance(t, torch.Tensor)]
    return mutated


def signature(func, args: tuple, kwargs: dict | None, out) -> OpSignature:
    """The signature of ``func(*args, **kwargs) -> out``."""
    frozen = tuple([spec(a) if isinstance(a, torch.Tensor) else freeze(a) for a in args])
    if isinstance(out, torch.Tensor):
        outs = (spec(out),)
    else:
        outs = tuple([spec(t) for t in written(func, args, kwargs, out)])
    named = tuple(sorted((k, freeze(v)) for k, v in kwargs.items())) if kwargs else ()
    return OpSignature(func, frozen, named, outs)


def _shapes(x):
    """Arguments as the flop formulas take them: each TensorSpec as its shape."""
    if isinstance(x, TensorSpec):
        return torch.Size(x.shape)
    if isinstance(x, tuple):
        return tuple(_shapes(i) for i in x)
    return x


class _Shaped(NamedTuple):
    """A tensor stand-in for the formulas registered with ``get_raw=True`` (they read
    ``.shape``)."""

    shape: torch.Size


def _raw(x):
    if isinstance(x, TensorSpec):
        return _Shaped(torch.Size(x.shape))
    if isinstance(x, tuple):
        return tuple(_raw(i) for i in x)
    return x


def _registry() -> dict:
    from torch.utils.flop_counter import flop_registry

    return flop_registry


#: Ops PyTorch runs for attention on devices other than CUDA, counted with the formula of the
#: CUDA op that computes the same thing (the registry has formulas for the CUDA ones only).
FORMULA_OF = {
    aten._scaled_dot_product_flash_attention_for_cpu:
        aten._scaled_dot_product_flash_attention,
    aten._scaled_dot_product_flash_attention_for_cpu_backward:
        aten._scaled_dot_product_flash_attention_backward,
    aten._scaled_dot_product_fused_attention_overrideable:
        aten._scaled_dot_product_flash_attention,
    aten._scaled_dot_product_fused_attention_overrideable_backward:
        aten._scaled_dot_product_flash_attention_backward,
}


def flops(sig: OpSignature) -> int:
    """FLOPs of one op by ``torch.utils.flop_counter``'s formula (0 where it has none)."""
    packet = getattr(sig.func, "_overloadpacket", sig.func)
    packet = FORMULA_OF.get(packet, packet)
    formula = _registry().get(packet)
    if formula is None:
        return 0
    kwargs = dict(sig.kwargs)
    outs = _masked(sig, kwargs)
    if outs is None:
        outs = sig.outputs[0] if len(sig.outputs) == 1 else sig.outputs
    if hasattr(formula, "__wrapped__"):  # shape_wrapper: shapes in, out_shape
        return int(formula(*_shapes(sig.args), **_shapes(kwargs), out_val=_shapes(outs)))
    return int(formula(*_raw(sig.args), **_raw(kwargs), out_val=_raw(outs)))


def _masked(sig: OpSignature, kwargs: dict) -> tuple | None:
    """The results of an op that makes only those its ``output_mask`` asks for (a
    convolution's backward), each in its place, None where not made: how the formulas read
    them (a signature lists only the tensors an op made). None for other ops."""
    schema = getattr(sig.func, "_schema", None)
    names = [a.name for a in schema.arguments] if schema is not None else []
    if "output_mask" not in names:
        return None
    at = names.index("output_mask")
    mask = sig.args[at] if at < len(sig.args) else kwargs.get("output_mask")
    made = iter(sig.outputs)
    return tuple(next(made, None) if wanted else None for wanted in mask)


def _mm(a, b) -> list[tuple[int, int, int, int]]:
    """(count, M, K, N) of a (batched) matmul of shapes ``a`` @ ``b``."""
    count = math.prod(a[:-2]) if len(a) > 2 else 1
    return [(count, a[-2], a[-1], b[-1])]


def matmul_dims(sig: OpSignature) -> list[tuple[int, int, int, int]] | None:
    """The matmuls inside an op as (count, M rows, K contracted, N columns), or None where
    the op is not one the MXU's tile is known for."""
    packet = getattr(sig.func, "_overloadpacket", None)
    packet = FORMULA_OF.get(packet, packet)
    a = [x.shape for x in sig.args if isinstance(x, TensorSpec)]
    if packet in (aten.mm, aten.bmm) and len(a) >= 2:
        return _mm(a[0], a[1])
    if packet in (aten.addmm, aten.baddbmm) and len(a) >= 3:
        return _mm(a[1], a[2])
    if packet in (aten.convolution, aten._convolution) and len(a) >= 2 and sig.outputs:
        w, out = a[1], sig.outputs[0].shape
        groups = sig.args[-1] if isinstance(sig.args[-1], int) else 1
        spatial = math.prod(out[2:])
        return [(groups, out[0] * spatial, math.prod(w[1:]), w[0] // max(groups, 1))]
    attention = (aten._scaled_dot_product_flash_attention,
                 aten._scaled_dot_product_efficient_attention,
                 aten._scaled_dot_product_cudnn_attention)
    if packet in attention and len(a) >= 3:
        q, k, v = a[0], a[1], a[2]
        heads = math.prod(q[:-2])
        return [(heads, q[-2], q[-1], k[-2]), (heads, q[-2], k[-2], v[-1])]
    return None


def _ceil(n: int, tile: int) -> int:
    return -(-n // tile) * tile


def padded(sig: OpSignature, chip: Chip, count: int) -> int:
    """``count`` FLOPs of ``sig`` as the MXU does them, its matmul dims rounded up to its
    tiles (8 rows; ``chip.mxu`` contracted and output columns)."""
    dims = matmul_dims(sig)
    if not dims or not count:
        return count
    real = sum(c * m * k * n for c, m, k, n in dims)
    if not real:
        return count
    tiles = sum(c * _ceil(m, 8) * _ceil(k, chip.mxu) * _ceil(n, chip.mxu) for c, m, k, n in dims)
    return round(count * tiles / real)


#: Ops that write part of a tensor (index updates, scatters, slice writes): they move the
#: update (read it, write it) and its indices, not the whole destination. Value: the argument
#: position of the update.
UPDATES = {
    aten.index_put: 2, aten.index_put_: 2, aten._index_put_impl_: 2,
    aten.index_copy: 3, aten.index_copy_: 3, aten.index_add: 3, aten.index_add_: 3,
    aten.slice_scatter: 1, aten.select_scatter: 1, aten.scatter: 3, aten.scatter_: 3,
    aten.scatter_add: 3, aten.scatter_add_: 3,
}
#: Ops that gather rows of a table (argument 0): they read the rows they return, not the table.
GATHERS = {aten.embedding, aten.index_select, aten.index, aten._unsafe_index, aten.gather}
#: Ops that only move data (copies, casts, gathers, scatters, concatenation, repeats): in a
#: fused graph they fuse into the matmuls that read or write them (see
#: :mod:`tpu_lab.estimate.graph`).
DATA_MOVEMENT = {
    aten._to_copy, aten.clone, aten.copy, aten.copy_, aten.index, aten.index_select,
    aten.gather, aten.cat, aten.stack, aten.repeat, aten.repeat_interleave, aten.embedding,
    aten.contiguous, aten._unsafe_index,
    *UPDATES,
}
#: Ops that only describe another tensor (no data moves) besides those torch marks as views.
_METADATA = {aten._unsafe_view, aten.alias, aten.detach, aten.lift_fresh, aten._reshape_alias,
             aten.view_as_real, aten.view_as_complex, aten.set_}


def is_view(func) -> bool:
    """True for ops that make a view or only change metadata: they cost nothing."""
    if getattr(func, "is_view", False):
        return True
    return getattr(func, "_overloadpacket", None) in _METADATA


def is_data_movement(func) -> bool:
    return getattr(func, "_overloadpacket", None) in DATA_MOVEMENT


def is_update(func) -> bool:
    """True for ops that write part of a tensor (:data:`UPDATES`)."""
    return getattr(func, "_overloadpacket", None) in UPDATES


def _tensors(x) -> list[TensorSpec]:
    if isinstance(x, TensorSpec):
        return [x]
    if isinstance(x, tuple):
        return [t for i in x for t in _tensors(i)]
    return []


class OpNumbers(NamedTuple):
    """One op's arithmetic: FLOPs (PyTorch's counter), padded FLOPs, seconds on the MXU at
    peak, bytes read per tensor input and written per output."""

    flops: int
    padded_flops: int
    compute_seconds: float
    reads: tuple[int, ...]
    writes: tuple[int, ...]

    @property
    def hbm_bytes(self) -> int:
        return sum(self.reads) + sum(self.writes)


def _peak(sig: OpSignature, chip: Chip, a: Assumptions) -> float:
    inputs = _tensors(sig.args)
    dtype = inputs[0].dtype if inputs else torch.bfloat16
    if dtype in (torch.int8, torch.uint8):
        return chip.peak_flops("int8")
    if "float8" in str(dtype):
        return chip.peak_flops("fp8")
    if dtype in (torch.float32, torch.float64):
        return chip.bf16_flops / max(a.f32_matmul_passes, 1)
    return chip.bf16_flops


@functools.lru_cache(maxsize=1 << 16)
def op_numbers(sig: OpSignature, chip: Chip, a: Assumptions) -> OpNumbers:
    """The arithmetic of one op on ``chip`` under assumptions ``a`` (cached per signature)."""
    if is_view(sig.func):
        return OpNumbers(0, 0, 0.0, (0,) * len(_tensors(sig.args)), (0,) * len(sig.outputs))
    count = flops(sig)
    pad = padded(sig, chip, count)
    inputs = _tensors(sig.args) + _tensors(tuple(v for _, v in sig.kwargs))
    reads = [t.nbytes for t in inputs]
    writes = [t.nbytes for t in sig.outputs]
    packet = getattr(sig.func, "_overloadpacket", None)
    if packet in GATHERS and reads and writes:
        reads[0] = min(reads[0], writes[0])
    where = UPDATES.get(packet)
    if where is not None and where < len(sig.args):
        update = sum(t.nbytes for t in _tensors(sig.args[where]))
        reads[0] = 0  # the destination is not read ...
        writes = [update] + [0] * (len(writes) - 1)  # ... and only the update is written
    seconds = pad / _peak(sig, chip, a) if pad else 0.0
    return OpNumbers(count, pad, seconds, tuple(reads), tuple(writes))
