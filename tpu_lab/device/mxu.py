"""The TPU's float32 matmul on the MXU, as pure functions: bfloat16 passes, float32 accumulation.

From TorchTPU's precision tutorial and PyTorch/XLA's precision tutorial (the public description
TorchTPU points to): the MXU multiplies bfloat16 numbers and accumulates in float32. A float32
operand ``x`` is split into bfloat16 parts ``x = hi + mid + lo`` (each the bfloat16 rounding of
what the previous parts left), and a float32 product is the float32 sum of some pairwise
bfloat16 products:

- ``Precision.DEFAULT``: 1 pass, ``hi·hi`` (8 significant bits per input);
- ``Precision.HIGH``: 3 passes (bf16x3), ``hi·hi + hi·mid + mid·hi`` (about 16 bits);
- ``Precision.HIGHEST``: 6 passes (bf16x6) on the TPU, which carry all 24 bits: modelled as the
  CPU's float32 product, bit for bit (:func:`passes` still gives the six bfloat16 passes).

A product of two bfloat16 numbers is exact in float32, so each pass run as a CPU float32
matmul of bfloat16-valued tensors is what the MXU computes up to the order of the float32
additions. :func:`bilinear` applies the model to any op linear in each operand (``mm``,
``bmm``, ``matmul``, ``linear``'s product, ``conv``); :func:`.emulation.emulate` makes the
device's own matmuls and convolutions compute this way.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .modes import Precision
from .process import current

#: The (i, j) pairs of bfloat16 parts multiplied at each precision (0 = hi, 1 = mid, 2 = lo).
PASSES: dict[Precision, tuple[tuple[int, int], ...]] = {
    Precision.DEFAULT: ((0, 0),),
    Precision.HIGH: ((0, 0), (0, 1), (1, 0)),
    Precision.HIGHEST: ((0, 0), (0, 1), (1, 0), (0, 2), (1, 1), (2, 0)),
}


def split(x: torch.Tensor, parts: int = 3) -> list[torch.Tensor]:
    """``x`` (float32) as ``parts`` float32 tensors holding bfloat16 values, largest first,
    each the bfloat16 rounding of what the previous ones left of ``x``."""
    if x.dtype != torch.float32:
        raise TypeError(f"split expects a float32 tensor, got {x.dtype}.")
    out, rest = [], x
    for _ in range(parts):
        part = rest.to(torch.bfloat16).to(torch.float32)
        out.append(part)
        rest = rest - part
    return out


def passes(op: Callable, a: torch.Tensor, b: torch.Tensor, precision: Precision, **kwargs):
    """``op(a, b)`` as the float32 sum of the bfloat16 passes of ``precision`` (no shortcut)."""
    pairs = PASSES[Precision(precision)]
    depth = 1 + max(max(pair) for pair in pairs)
    pa, pb = split(a, depth), split(b, depth)
    # the small terms first, as XLA adds them, so that the large pass absorbs their rounding
    total = None
    for i, j in reversed(pairs):
        term = op(pa[i], pb[j], **kwargs)
        total = term if total is None else total + term
    return total


def bilinear(op: Callable, a: torch.Tensor, b: torch.Tensor, precision=None, **kwargs):
    """``op(a, b, **kwargs)`` as the MXU computes it at ``precision`` (default: the innermost
    ``torch.tpu.precision`` block, else ``DEFAULT``). Non-float32 operands and ``HIGHEST`` run
    ``op`` as is (float32, bit for bit the CPU's)."""
    precision = current().precision if precision is None else Precision(precision)
    if a.dtype != torch.float32 or b.dtype != torch.float32 or precision is Precision.HIGHEST:
        return op(a, b, **kwargs)
    return passes(op, a, b, precision, **kwargs)


def mxu_matmul(a: torch.Tensor, b: torch.Tensor, precision=Precision.DEFAULT) -> torch.Tensor:
    """``a @ b`` for float32 tensors as the MXU computes it at ``precision``."""
    return bilinear(torch.matmul, a, b, precision)


def ulp(x: torch.Tensor) -> torch.Tensor:
    """The float32 unit in the last place of each element of ``x`` (any float dtype)."""
    x32 = x.to(torch.float32).abs()
    return torch.nextafter(x32, torch.full_like(x32, float("inf"))) - x32
