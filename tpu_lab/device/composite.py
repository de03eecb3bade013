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

from . import kernels
from .kernels import (
    NoPayloadError,
    _Binding,
    _function_mode,
    _unwrap,
    _wrap_results,
    storage_data_ptr,
)

_Tensor = torch.Tensor
_grad_enabled = torch.is_grad_enabled
_COMPOSITE = torch._C.DispatchKey.CompositeImplicitAutograd
_autocast_enabled = torch.is_autocast_enabled
_any_autocast = torch._C._is_any_autocast_enabled
# Random composites would draw from the CPU generator on the payloads: keep them decomposed so
# the random ops inside use the device's generator (dropout has a kernel of its own: dropout.py).
_RANDOM = frozenset({"feature_dropout", "alpha_dropout", "feature_alpha_dropout", "rrelu"})
# Composites the device handles with kernels of its own, questions about the tensors rather than
# their values (is a tpu tensor shallow-copyable into a cpu one? no), and sync points (they must
# reach _local_scalar_dense on the device, where the event log sees them).
_SKIP = frozenset(
    {
        "scaled_dot_product_attention", "dropout", "item", "is_nonzero",
        "_has_compatible_shallow_copy_type",
        # their decompositions call the fused RNN cells, which have no CPU kernel (rnn.py)
        "_thnn_fused_lstm_cell_backward", "_thnn_differentiable_lstm_cell_backward",
        "_thnn_differentiable_gru_cell_backward",
    }
)


def _needs_grad(values) -> bool:
    for v in values:
        if isinstance(v, _Tensor):
            if v.requires_grad:
                return True
        elif isinstance(v, (list, tuple)) and _needs_grad(v):
            return True
    return False


def _aliases_input(result, uargs) -> bool:
    if not isinstance(result, _Tensor):
        return isinstance(result, (list, tuple)) and any(_aliases_input(r, uargs) for r in result)
    ptr = storage_data_ptr(result.untyped_storage())
    return bool(ptr) and any(
        isinstance(u, _Tensor) and storage_data_ptr(u.untyped_storage()) == ptr for u in uargs
    )


# Composites that always return new storage: no need to check their results for aliasing.
_FRESH = frozenset(
    {
        "linear", "bilinear", "matmul", "softmax", "log_softmax", "layer_norm", "group_norm",
        "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
        "cross_entropy_loss", "nll_loss_nd", "cosine_similarity", "pairwise_distance",
    }
)  # fmt: skip


def _kernel(qualname: str):
    op = call = binding = None
    fresh = qualname.partition(".")[0] in _FRESH

    def kernel(*args, **kwargs):
        nonlocal op, call, binding
        if op is None:
            name, _, overload = qualname.partition(".")
            op = getattr(getattr(torch.ops.aten, name), overload or "default")
            call = op._op
            # a random composite must not run twice (a binding's probe runs it twice)
            random = torch.Tag.nondeterministic_seeded in op.tags or any(
                a.name == "generator" for a in op._schema.arguments
            )
            binding = _Binding(op, not random)
        if kernels.recorder is not None:
            kernels.recorder(qualname, args, kwargs)
        if not (
            (_any_autocast() and _autocast_enabled("tpu"))
            or (_grad_enabled() and (_needs_grad(args) or _needs_grad(kwargs.values())))
        ):
            try:
                uargs = [_unwrap(a, True) for a in args]
                ukwargs = {k: _unwrap(v, True) for k, v in kwargs.items()} if kwargs else kwargs
            except NoPayloadError:  # tracing: fake tensors decompose as usual
                return decompose(*args, **kwargs)
            fn = binding.fn
            if fn is not None and not _function_mode():
                out = fn(
                    *uargs,
                    *binding.rest[len(uargs) :],
                    **({**binding.kw, **ukwargs} if binding.kw else ukwargs),
                )
            elif binding.tries and not _function_mode():
                out = binding.probe(call, uargs, ukwargs)
            else:
                out = call(*uargs, **ukwargs)
            if fresh or not _aliases_input(out, uargs):
                if kernels.recorder is None and kernels.counter is not None:
                    kernels.counter(qualname, args, kwargs)  # one op: one single-op graph
                return _wrap_results(out, args, uargs)
        return decompose(*args, **kwargs)

    def decompose(*args, **kwargs):
        # The C++ decomposition, as the CPU runs it (OpOverload.decompose would prefer a
        # Python decomposition from torch._decomp where one exists: different rounding).
        return op._op_dk(_COMPOSITE, *args, **kwargs)

    return kernel


def _out_dtype(matmul):
    """TorchTPU's ``out_dtype`` matmuls (``aten::bmm.dtype``, ``aten::mm.dtype``; no CPU kernel
    exists): bfloat16 or float16 inputs, a float32 accumulator and result."""

    def kernel(self, mat2, out_dtype):
        if not (
            out_dtype == self.dtype
            or (out_dtype == torch.float32 and self.dtype in (torch.bfloat16, torch.float16))
        ):
            raise RuntimeError(
                "out_dtype must be the input's dtype, or float32 for bfloat16 and float16 "
                f"inputs; got inputs of {self.dtype} and out_dtype {out_dtype}"
            )
        return matmul(self.to(out_dtype), mat2.to(out_dtype))

    return kernel


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


#: The composites given a kernel here (the TPU numerics emulation makes them decompose).
NAMES: list[str] = []


def register(lib: torch.library.Library) -> int:
    lib.m.impl("mm.dtype", "PrivateUse1", _out_dtype(torch.mm), False)
    lib.m.impl("bmm.dtype", "PrivateUse1", _out_dtype(torch.bmm), False)
    NAMES[:] = _composites()
    for name in NAMES:
        lib.m.impl(name, "AutogradPrivateUse1", _kernel(name), False)
    return len(NAMES)
