"""``scaled_dot_product_attention`` on "tpu": the same kernel choice as on the CPU.

Without this kernel, PrivateUse1 falls back to the generic math path, whose numbers differ
from the CPU's fused kernel. When no gradient is needed and nothing random is drawn, the CPU's
own ``scaled_dot_product_attention`` runs on the payloads (one dispatch; the CPU chooses its
kernel itself). Otherwise the choice is made by asking the CPU which backend it would use for
tensors with the same metadata, then calling that backend's op on the "tpu" tensors.
"""

from __future__ import annotations

import torch

from . import kernels
from .driver import PAYLOAD
from .kernels import NoPayloadError, _unwrap, payload, wrap

aten = torch.ops.aten
_FLASH = 1
_cpu_sdpa = aten.scaled_dot_product_attention.default._op
_grad_enabled = torch.is_grad_enabled
_any_autocast = torch._C._is_any_autocast_enabled
_CPU_KEYS = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)


def _choice(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa) -> int:
    """The backend the CPU would pick (``_fused_sdp_choice``) for tensors like these."""
    tensors = (q, k, v, attn_mask)
    if all(t is None or hasattr(t.untyped_storage(), PAYLOAD) for t in tensors):
        grad = torch.is_grad_enabled()
        twins = [
            None
            if t is None
            else payload(t).detach().requires_grad_()
            if grad and t.requires_grad
            else payload(t)
            for t in tensors
        ]
        return aten._fused_sdp_choice.default(
            *twins, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa
        )
    # Tracing (FakeTensorMode under torch.compile): the CPU's kernel of the choice reads only
    # the metadata, so it runs on the fake tensors themselves, past the fake mode (symbolic
    # sizes under dynamic=True guard as they do for the CPU's own fake tensors).
    return aten._fused_sdp_choice.default.redispatch(
        _CPU_KEYS, q, k, v, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa
    )


def _on_payloads(q, k, v, attn_mask, is_causal, scale, enable_gqa):
    """The CPU's SDPA on the payloads, or None where that would not be the CPU's numbers
    (gradients, autocast, tracing) or the event recorder needs the ops one by one."""
    if kernels.recorder is not None or (_any_autocast() and torch.is_autocast_enabled("tpu")):
        return None
    if _grad_enabled() and (
        q.requires_grad
        or k.requires_grad
        or v.requires_grad
        or (attn_mask is not None and attn_mask.requires_grad)
    ):
        return None
    try:
        uq, uk, uv = _unwrap(q, True), _unwrap(k, True), _unwrap(v, True)
        umask = None if attn_mask is None else _unwrap(attn_mask, True)
    except NoPayloadError:  # tracing: fake tensors take the kernel choice below
        return None
    out = _cpu_sdpa(uq, uk, uv, umask, 0.0, is_causal, scale=scale, enable_gqa=enable_gqa)
    if kernels.counter is not None:  # one op: one single-op graph
        kernels.counter(
            "scaled_dot_product_attention",
            (q, k, v, attn_mask, 0.0, is_causal),
            {"scale": scale, "enable_gqa": enable_gqa},
        )
    return wrap(out)


def sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    if dropout_p == 0.0:
        out = _on_payloads(q, k, v, attn_mask, is_causal, scale, enable_gqa)
        if out is not None:
            return out
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        zero = torch.scalar_tensor(0.0, dtype=q.dtype, device=q.device)
        attn_mask = torch.where(
            attn_mask, zero, torch.scalar_tensor(-float("inf"), dtype=q.dtype, device=q.device)
        )
    if _choice(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa) == _FLASH:
        return aten._scaled_dot_product_flash_attention_for_cpu.default(
            q, k, v, dropout_p, is_causal, attn_mask=attn_mask, scale=scale
        )[0]
    return aten._scaled_dot_product_attention_math.default(
        q, k, v, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa
    )[0]


def register(lib: torch.library.Library) -> None:
    lib.m.impl("scaled_dot_product_attention", "AutogradPrivateUse1", sdpa, False)
