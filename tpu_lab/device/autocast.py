"""``torch.autocast("tpu")``: the CPU autocast policy, applied to "tpu" tensors.

Ops on the lower-precision list run in the autocast dtype (bfloat16 by default), ops on the
float32 list run in float32, every other op runs in the dtype it is given. The lists are the
CPU's, so autocast on "tpu" gives the CPU's numbers.
"""

from __future__ import annotations

import torch

_KEYS = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastPrivateUse1)

LOWER_PRECISION = (
    "conv1d",
    "conv1d.padding",
    "conv2d",
    "conv2d.padding",
    "conv3d",
    "conv3d.padding",
    "bmm",
    "mm",
    "linalg_vecdot",
    "baddbmm",
    "addmm",
    "addbmm",
    "linear",
    "_convolution.deprecated",
    "matmul",
    "conv_tbc",
    "conv_transpose1d",
    "conv_transpose2d.input",
    "conv_transpose3d.input",
    "prelu",
    "scaled_dot_product_attention",
)
FLOAT32 = (
    "avg_pool3d",
    "binary_cross_entropy",
    "grid_sampler",
    "polar",
    "prod",
    "prod.dim_int",
    "quantile",
    "nanquantile",
    "stft",
    "cdist",
    "trace",
    "view_as_complex",
    "cholesky",
    "cholesky_inverse",
    "cholesky_solve",
    "inverse",
    "lu_solve",
    "orgqr",
    "ormqr",
    "pinverse",
    "max_pool3d",
    "max_unpool2d",
    "max_unpool3d",
    "adaptive_avg_pool3d",
    "reflection_pad1d",
    "reflection_pad2d",
    "replication_pad1d",
    "replication_pad2d",
    "replication_pad3d",
    "mse_loss",
    "cosine_embedding_loss",
    "nll_loss",
    "nll_loss2d",
    "hinge_embedding_loss",
    "poisson_nll_loss",
    "smooth_l1_loss",
    "cross_entropy_loss",
    "l1_loss",
    "huber_loss",
    "margin_ranking_loss",
    "soft_margin_loss",
    "triplet_margin_loss",
    "multi_margin_loss",
    "ctc_loss.IntList",
    "ctc_loss.Tensor",
    "kl_div",
    "multilabel_margin_loss",
    "binary_cross_entropy_with_logits",
)
_CASTABLE = (torch.float32, torch.float16, torch.bfloat16)


def _cast(x, dtype):
    if isinstance(x, torch.Tensor):
        if x.device.type == "tpu" and x.dtype in _CASTABLE and x.dtype != dtype:
            return x.to(dtype)
        return x
    if isinstance(x, (list, tuple)):
        return type(x)(_cast(y, dtype) for y in x)
    return x


def _kernel(op, fixed_dtype):
    def kernel(*args, **kwargs):
        dtype = fixed_dtype or torch.get_autocast_dtype("tpu")
        with torch._C._ExcludeDispatchKeyGuard(_KEYS):
            args = [_cast(a, dtype) for a in args]
            kwargs = {k: _cast(v, dtype) for k, v in kwargs.items()}
            return op(*args, **kwargs)

    return kernel


def register(lib: torch.library.Library, fallback_lib: torch.library.Library) -> None:
    """Autocast kernels for the two lists; every other op falls through."""
    fallback_lib.fallback(torch.library.fallthrough_kernel, "AutocastPrivateUse1")
    aten = torch.ops.aten
    for names, dtype in ((LOWER_PRECISION, None), (FLOAT32, torch.float32)):
        for name in names:
            base, _, overload = name.partition(".")
            packet = getattr(aten, base, None)
            op = getattr(packet, overload or "default", None) if packet is not None else None
            if op is None:
                continue
            lib.m.impl(name, "AutocastPrivateUse1", _kernel(op, dtype), False)
