"""Composite ops in one step: ``linear``, ``matmul``, ``softmax``... run whole on the CPU.

PyTorch decomposes a CompositeImplicitAutograd op (``linear`` -> ``t`` + ``matmul`` -> ``view`` +
``mm`` + ``_unsafe_view``) before it reaches a backend, so every piece would pay the device's
per-op cost. When no gradient is needed, the kernel registered here for ``AutogradPrivateUse1``
runs the whole op on the payloads instead: one dispatch, and by construction the CPU's own
numbers (the CPU runs the same decomposition, or a fused kernel it picks for itself). The op is
decomposed as usual when a gradient is needed, when autocast is on (the CPU payloads would not
see "tpu" autocast), while tracing (fake tensors have no payload), and when a result would alias
an input.
"""

from __future__ import annotations

import torch

from .driver import PAYLOAD
from .kernels import _unwrap, _view_of, _wrap_results, storage_data_ptr

_Tensor = torch.Tensor
_grad_enabled = torch.is_grad_enabled
_autocast_enabled = torch.is_autocast_enabled
# Random composites would draw from the CPU generator on the payloads: keep them decomposed so
# the random ops inside use the device's generator (dropout has a kernel of its own below).
_RANDOM = frozenset({"feature_dropout", "alpha_dropout", "feature_alpha_dropout", "rrelu"})
# Composites the device handles with kernels of its own.
_SKIP = frozenset({"scaled_dot_product_attention"})
_DECOMPOSE = object()


def _payloads(values, grad: bool):
    """CPU views of the arguments, or ``_DECOMPOSE`` if the op must be decomposed."""
    out = []
    for v in values:
        if isinstance(v, _Tensor):
            if grad and v.requires_grad:
                return _DECOMPOSE
            block = getattr(v.untyped_storage(), PAYLOAD, None)
            if block is not None:
                out.append(_view_of(block, v))
            elif v.is_cpu:
                out.append(_unwrap(v, True))
            else:  # a tensor without a payload: fake (tracing) or another device
                return _DECOMPOSE
        elif isinstance(v, (list, tuple)):
            inner = _payloads(v, grad)
            if inner is _DECOMPOSE:
                return _DECOMPOSE
            out.append(type(v)(inner))
        else:
            out.append(v)
    return out


def _aliases_input(result, uargs) -> bool:
    if not isinstance(result, _Tensor):
        return isinstance(result, (list, tuple)) and any(_aliases_input(r, uargs) for r in result)
    ptr = storage_data_ptr(result.untyped_storage())
    return bool(ptr) and any(
        isinstance(u, _Tensor) and storage_data_ptr(u.untyped_storage()) == ptr for u in uargs
    )


def _kernel(qualname: str):
    op = None

    def kernel(*args, **kwargs):
        nonlocal op
        if op is None:
            name, _, overload = qualname.partition(".")
            op = getattr(getattr(torch.ops.aten, name), overload or "default")
        if not _autocast_enabled("tpu"):
            grad = _grad_enabled()
            uargs = _payloads(args, grad)
            ukwargs = _payloads(kwargs.values(), grad) if kwargs else ()
            if uargs is not _DECOMPOSE and ukwargs is not _DECOMPOSE:
                out = op(*uargs, **dict(zip(kwargs, ukwargs, strict=True)))
                if not _aliases_input(out, uargs):
                    return _wrap_results(out, args, uargs)
        return op.decompose(*args, **kwargs)

    return kernel


def dropout(input, p: float, train: bool):
    """``dropout`` the way the CPU computes it (``input * bernoulli_(1 - p) / (1 - p)``).

    ATen sends PrivateUse1 tensors to the fused ``native_dropout``, whose backward scales in
    float: in bfloat16 its gradients differ from the CPU's by one rounding.
    """
    if p == 0 or not train or input.numel() == 0:
        return input
    if p == 1:
        return input * torch.zeros((), dtype=input.dtype, device=input.device)
    noise = torch.empty_like(input).bernoulli_(1 - p)
    noise.div_(1 - p)
    return input * noise


def _composites() -> list[str]:
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    names = []
    for schema in torch._C._jit_get_all_schemas():
        full = schema.name
        base = full[6:]
        if not full.startswith("aten::") or base in _RANDOM or base in _SKIP:
            continue
        if schema.is_mutable or any(r.alias_info is not None for r in schema.returns):
            continue
        if schema.overload_name:
            full = f"{full}.{schema.overload_name}"
        try:
            if not has(full, "CompositeImplicitAutograd") or has(full, "AutogradPrivateUse1"):
                continue
        except RuntimeError:
            continue
        names.append(full[6:])
    return names


def register(lib: torch.library.Library) -> int:
    lib.m.impl("dropout", "AutogradPrivateUse1", dropout, False)
    names = _composites()
    for name in names:
        lib.m.impl(name, "AutogradPrivateUse1", _kernel(name), False)
    return len(names) + 1
