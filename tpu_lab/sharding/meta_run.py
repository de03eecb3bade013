"""Running a model on the meta device for an estimate, the way a TPU would run it.

Two parts of a model run differently on the meta device than on a TPU, and are replaced while
it is recorded (on this model instance, or inside a block; nothing global is patched):

- **Attention.** ``scaled_dot_product_attention`` on meta tensors always takes PyTorch's math
  path, which writes the whole ``seq x seq`` score matrix to memory. A TPU runs a fused kernel
  (splash/flash attention) that never does; inside :class:`FusedAttention` the call runs the
  fused kernel the bundled device runs too, as the CPU picks it
  (``aten._scaled_dot_product_flash_attention_for_cpu``: it keeps the output and one float32
  log-sum-exp per query for the backward, reads grouped key/value heads as they are, takes a
  mask), whose FLOPs PyTorch's counter knows; with dropout (attention dropout in training),
  where the CPU, the bundled device and PyTorch's accelerators other than CUDA have no fused
  kernel, the math path they run. transformers models attend through the same function
  (:func:`use_fused_attention`), which also spares them a causal mask (a causal kernel computes
  its mask on chip) and the mask's data-dependent checks, which meta tensors cannot answer.
  A torch-function mode does not reach the backward: a checkpointed block enters it again for
  its recomputation (:func:`tpu_lab.sharding.remat.checkpoint_blocks`' ``run_in``).
- **Mixture-of-experts.** A router's choice depends on the data, which the meta device does
  not have. :func:`balance_experts` makes every expert module of transformers' MoE models
  (those with stacked ``gate_up_proj``/``down_proj`` weights) process an equal share of the
  routed tokens, ``tokens * top_k / num_experts`` each (the balanced routing a capacity
  factor of 1 gives): the FLOPs of the active experts, each expert's weights read once.
"""

from __future__ import annotations

import math
import types

import torch
from torch.nn import functional
from torch.overrides import TorchFunctionMode

aten = torch.ops.aten


def fused_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
                    scale=None, enable_gqa=False):
    """``scaled_dot_product_attention`` as the CPU runs it (see the module's docstring): its
    fused kernel, a boolean mask made additive first as PyTorch does; its math path with
    dropout."""
    if dropout_p > 0:
        return aten._scaled_dot_product_attention_math(
            query, key, value, attn_mask, dropout_p, is_causal, scale=scale,
            enable_gqa=enable_gqa)[0]
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        attn_mask = torch.zeros(attn_mask.shape, dtype=query.dtype, device=query.device)
    return aten._scaled_dot_product_flash_attention_for_cpu(
        query, key, value, dropout_p, is_causal, attn_mask=attn_mask, scale=scale)[0]


#: The name under which transformers models attend with :func:`fused_attention` (registered
#: with transformers' ``AttentionInterface``; a model uses it only when set on that model).
ATTENTION = "tpu_lab_estimate"


def _transformers_attention(module, query, key, value, attention_mask, dropout=0.0,
                            scaling=None, is_causal=None, **kwargs):
    """transformers' attention-function signature over :func:`fused_attention`, as its "sdpa"
    implementation calls it: no mask (the name is not a mask-making implementation, so
    transformers makes none), causal whenever the module is causal and more than one query
    attends."""
    causal = getattr(module, "is_causal", True) if is_causal is None else is_causal
    causal = query.shape[2] > 1 and attention_mask is None and causal
    out = fused_attention(query, key, value, attention_mask, dropout, causal, scaling,
                          key.shape[1] != query.shape[1])
    return out.transpose(1, 2).contiguous(), None


def use_fused_attention(model: torch.nn.Module) -> None:
    """Have a transformers ``model`` (and only it) attend with :func:`fused_attention`."""
    from transformers import AttentionInterface

    AttentionInterface.register(ATTENTION, _transformers_attention)
    model.set_attn_implementation(ATTENTION)


class FusedAttention(TorchFunctionMode):
    """Inside it, ``functional.scaled_dot_product_attention`` runs as :func:`fused_attention`."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is functional.scaled_dot_product_attention:
            return fused_attention(*args, **(kwargs or {}))
        return func(*args, **(kwargs or {}))


def _linear(module, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x @ w if getattr(module, "is_transposed", False) else functional.linear(x, w)


def _balanced(self, hidden_states, top_k_index, top_k_weights):
    """An expert module's forward with the routed tokens shared equally among the experts."""
    tokens, top_k = hidden_states.shape[0], top_k_index.shape[-1]
    per = max(1, math.ceil(tokens * top_k / self.num_experts))
    rows = min(per, tokens)
    weight = top_k_weights.reshape(-1)[:rows, None].to(hidden_states.dtype)
    out = torch.zeros_like(hidden_states)
    for e in range(self.num_experts):
        x = hidden_states[:rows]
        gate, up = _linear(self, x, self.gate_up_proj[e]).chunk(2, dim=-1)
        y = _linear(self, self.act_fn(gate) * up, self.down_proj[e])
        out = out.index_add(0, torch.arange(rows, device=out.device), y * weight)
    return out


def balance_experts(model: torch.nn.Module) -> int:
    """Give every stacked-expert module of ``model`` the balanced forward; returns how many."""
    count = 0
    for module in model.modules():
        stacked = (getattr(module, "gate_up_proj", None), getattr(module, "down_proj", None))
        if (all(isinstance(p, torch.nn.Parameter) and p.dim() == 3 for p in stacked)
                and hasattr(module, "num_experts") and hasattr(module, "act_fn")):
            module.forward = types.MethodType(_balanced, module)
            count += 1
    return count
