"""The TPU numerics emulation on the device: "tpu" float32 matmuls and convolutions computed as
the MXU computes them (:mod:`.mxu`), at the precision of the innermost ``torch.tpu.precision``
block (else ``torch.set_float32_matmul_precision``'s, ``DEFAULT`` unless set).

While the emulation is on (``TPU_LAB_NUMERICS=tpu`` at start, ``tpu_lab.numerics.emulate()`` at
run time) a library of "tpu" kernels for the ops below takes precedence over the device's own;
turning it off destroys the library, so the device's kernels (bitwise the CPU's)
run again and nothing is checked on their path. The ops: ``mm``, ``bmm``, ``addmm``,
``baddbmm``, ``mv``, ``dot``, ``addmv`` (what ``matmul``, ``linear``, ``einsum`` and
``tensordot`` decompose to, forward and backward), ``convolution`` and ``convolution_backward``
(every ``conv*d``), and ``scaled_dot_product_attention``, which runs PyTorch's math path (two
``bmm``s at the precision, the softmax in float32) instead of the CPU's fused kernel. With
float32 operands at ``DEFAULT`` or ``HIGH`` the product is :func:`.mxu.passes`, and an added
term (``addmm``'s ``self``, a convolution's bias) is added to it in float32 afterwards; other
dtypes and ``HIGHEST`` run the CPU kernel, as the device does without the emulation.
"""

from __future__ import annotations

import os
import threading
import warnings

import torch

from . import mxu
from .modes import NUMERICS_ENV, Precision
from .process import current

aten = torch.ops.aten
_F32 = torch.float32
_lock = threading.Lock()
_library: torch.library.Library | None = None


def requested_at_start() -> bool:
    """Whether ``TPU_LAB_NUMERICS=tpu`` asks for the emulation from the start."""
    value = os.environ.get(NUMERICS_ENV, "cpu").strip().lower() or "cpu"
    if value not in ("cpu", "tpu"):
        raise ValueError(f"{NUMERICS_ENV}={value!r} is not valid; use 'cpu' (default) or 'tpu'.")
    return value == "tpu"


def emulate(active: bool = True) -> bool:
    """Turn the TPU numerics emulation on or off for the process; returns the previous state.
    On, float32 matmuls and convolutions of "tpu" tensors compute as the MXU does at the current
    ``torch.tpu.precision``; off (the default), bitwise as on the CPU.
    ``TPU_LAB_NUMERICS=tpu`` turns it on at start."""
    previous = is_enabled()
    if active:
        enable()
    else:
        disable()
    return previous


def is_enabled() -> bool:
    return _library is not None


def enable() -> None:
    """Register the emulating kernels (idempotent). Creates the device first if need be."""
    global _library
    device = current()
    with _lock:
        if _library is not None:
            return
        library = torch.library.Library("aten", "IMPL")
        with warnings.catch_warnings():
            # "Overriding a previously registered kernel": that is the point, and it is undone
            warnings.filterwarnings("ignore", message="(?s).*Overriding a previously registered")
            for name, kernel in _KERNELS.items():
                library.m.impl(name, "PrivateUse1", kernel, False)
            attention = _attention()
            for key in ("AutogradPrivateUse1", "PrivateUse1"):  # PrivateUse1: inference mode
                library.m.impl("scaled_dot_product_attention", key, attention, False)
        _library = library
        device.graph_decompositions = decompositions()


def disable() -> None:
    """Remove the emulating kernels: the device's own run again (idempotent)."""
    global _library
    with _lock:
        if _library is not None:
            _library._destroy()
            _library = None
            current().graph_decompositions = None


def _overload(qualname: str):
    name, _, overload = qualname.partition(".")
    return getattr(getattr(aten, name), overload or "default")


# --- the products, on any tensors: payloads (the kernels) or traced ones (torch.compile) -----


def _emulated(a: torch.Tensor, b: torch.Tensor) -> Precision | None:
    """The precision to emulate for operands ``a`` and ``b``, or None: run the CPU kernel."""
    if a.dtype is not _F32 or b.dtype is not _F32:
        return None
    precision = current().precision
    return None if precision is Precision.HIGHEST else precision


def _affine(product, term, beta, alpha):
    """``beta * term + alpha * product`` as XLA adds a matmul's term: after the product, in
    float32 (``beta == 0`` ignores ``term``, NaNs included, as PyTorch does)."""
    out = product if alpha == 1 else product * alpha
    if beta == 0:
        return out
    return out + (term if beta == 1 else term * beta)


def _product(op):
    def compute(a, b):
        precision = _emulated(a, b)
        return op(a, b) if precision is None else mxu.passes(op, a, b, precision)

    return compute


def _product_plus(op, product):
    def compute(term, a, b, *, beta=1, alpha=1):
        precision = _emulated(a, b)
        if precision is None:
            return op(term, a, b, beta=beta, alpha=alpha)
        return _affine(mxu.passes(product, a, b, precision), term, beta, alpha)

    return compute


def _convolution(x, w, b, stride, padding, dilation, transposed, output_padding, groups):
    geometry = (stride, padding, dilation, transposed, output_padding, groups)
    precision = _emulated(x, w)
    if precision is None:
        return aten.convolution.default(x, w, b, *geometry)
    out = mxu.passes(lambda p, q: aten.convolution.default(p, q, None, *geometry), x, w, precision)
    return out if b is None else out + b.reshape(1, -1, *([1] * (out.dim() - 2)))


def _convolution_backward(g, x, w, bias_sizes, stride, padding, dilation, transposed,
                          output_padding, groups, output_mask):  # fmt: skip
    geometry = (stride, padding, dilation, transposed, output_padding, groups)
    backward = aten.convolution_backward.default
    precision = _emulated(g, w) if x.dtype is _F32 else None
    if precision is None:
        return backward(g, x, w, bias_sizes, *geometry, output_mask)
    # each gradient is linear in the two tensors it multiplies; the bias's is a sum
    return (
        mxu.passes(
            lambda p, q: backward(p, x, q, None, *geometry, [True, False, False])[0],
            g, w, precision,
        ) if output_mask[0] else None,
        mxu.passes(
            lambda p, q: backward(q, p, w, None, *geometry, [False, True, False])[1],
            x, g, precision,
        ) if output_mask[1] else None,
        backward(g, x, w, bias_sizes, *geometry, [False, False, True])[2]
        if output_mask[2] else None,
    )  # fmt: skip


_COMPUTE = {
    "mm": _product(aten.mm.default),
    "bmm": _product(aten.bmm.default),
    "mv": _product(aten.mv.default),
    "dot": _product(aten.dot.default),
    "addmm": _product_plus(aten.addmm.default, aten.mm.default),
    "baddbmm": _product_plus(aten.baddbmm.default, aten.bmm.default),
    "addmv": _product_plus(aten.addmv.default, aten.mv.default),
    "convolution": _convolution,
    "convolution_backward": _convolution_backward,
}


# --- the device's kernels: "tpu" tensors in, "tpu" tensors out -----------------------------


def _cpu(value):
    """A "tpu" tensor's CPU payload; a CPU tensor with dimensions is the device's mixed-device
    error; anything else as is."""
    if not isinstance(value, torch.Tensor):
        return value
    if value.device.type == "tpu":
        return current().payload(value)
    if value.dim() > 0:
        raise RuntimeError(
            "Expected all tensors to be on the same device, but found at least two devices, "
            "tpu:0 and cpu! Move the CPU tensor with .to('tpu') (or the 'tpu' one with .cpu())."
        )
    return value


def _wrap(value):
    if isinstance(value, tuple):
        return tuple(_wrap(v) for v in value)
    return value if value is None else current().wrap(value)


def _kernel(name: str, compute):
    def kernel(*args, **kwargs):
        current().cache.note(name, args, kwargs)  # recorded (DEFER_AND_FUSE) or counted
        return _wrap(compute(*[_cpu(a) for a in args], **kwargs))

    return kernel


_KERNELS = {name: _kernel(name, compute) for name, compute in _COMPUTE.items()}


# --- torch.compile(backend="tpu") ----------------------------------------------------------

_tracing = threading.local()


def decompositions() -> dict:
    """The same products for ``torch.compile(backend="tpu")`` graphs compiled while the
    emulation is on: decomposed when the graph is traced (forward and backward) into the
    bfloat16 passes of the precision current then. (The product ops inside a decomposition are
    left as they are.)"""

    def decomposition(compute):
        def run(*args, **kwargs):
            if getattr(_tracing, "inside", False):
                return NotImplemented
            _tracing.inside = True
            try:
                return compute(*args, **kwargs)
            finally:
                _tracing.inside = False

        return run

    return {_overload(name): decomposition(compute) for name, compute in _COMPUTE.items()}


def _attention():
    """``scaled_dot_product_attention`` for float32 at ``DEFAULT``/``HIGH``: PyTorch's math path
    on the device, whose ``bmm``s the kernels above emulate (backward through autograd); other
    cases take the device's own path (the CPU's kernel choice), as without the emulation."""
    sdpa = aten.scaled_dot_product_attention.default
    implicit = torch._C.DispatchKey.CompositeImplicitAutograd

    def own(*args, **kwargs):
        return sdpa._op_dk(implicit, *args, **kwargs)

    math = aten._scaled_dot_product_attention_math.default

    def kernel(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
               enable_gqa=False):  # fmt: skip
        if not (
            q.dtype is _F32 and k.dtype is _F32 and v.dtype is _F32
            and current().precision is not Precision.HIGHEST
        ):  # fmt: skip
            return own(q, k, v, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa)
        if attn_mask is not None and attn_mask.dtype == torch.bool:
            zero = torch.scalar_tensor(0.0, dtype=q.dtype, device=q.device)
            minus_inf = torch.scalar_tensor(-float("inf"), dtype=q.dtype, device=q.device)
            attn_mask = torch.where(attn_mask, zero, minus_inf)
        return math(q, k, v, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa)[0]

    return kernel
