"""flex_attention on "tpu", with gradients, eager and compiled (Transformers'
``attn_implementation="flex_attention"`` compiles it): TorchTPU lets "tpu" inputs through
PyTorch's device check, and so does the bundled device (tpu_lab/device/flex_attention.py).

The CPU refuses flex_attention's backward, eager and compiled, so gradients are compared with
``scaled_dot_product_attention``'s math on the CPU (close, not bitwise: another algorithm);
forwards are compared with the CPU's flex_attention bitwise.
"""

from __future__ import annotations

import pytest
import torch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

import tpu_lab  # noqa: F401  (installs the "tpu" device)

SEQ = 128


def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def inputs():
    torch.manual_seed(0)
    return [torch.randn(1, 2, SEQ, 16) for _ in range(3)]


def sdpa_reference(q, k, v):
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    out = torch.nn.functional.scaled_dot_product_attention(*leaves, is_causal=True)
    out.sum().backward()
    return out.detach(), [t.grad for t in leaves]


@pytest.mark.parametrize("score_mod", [None, lambda s, b, h, q, kv: s * 0.5])
def test_the_forward_is_the_cpus(score_mod):
    q, k, v = inputs()
    cpu = flex_attention(q, k, v, score_mod=score_mod, block_mask=create_block_mask(
        causal, 1, 1, SEQ, SEQ, device="cpu"))  # fmt: skip
    tpu = flex_attention(*(t.to("tpu") for t in (q, k, v)), score_mod=score_mod,
                         block_mask=create_block_mask(causal, 1, 1, SEQ, SEQ, device="tpu"))  # fmt: skip
    assert torch.equal(tpu.cpu(), cpu)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_gradients_flow_on_tpu(compiled, fresh_dynamo):
    q, k, v = inputs()
    leaves = [t.to("tpu").requires_grad_() for t in (q, k, v)]
    attend = torch.compile(flex_attention) if compiled else flex_attention
    out = attend(*leaves, block_mask=create_block_mask(causal, 1, 1, SEQ, SEQ, device="tpu"))
    out.sum().backward()
    want, grads = sdpa_reference(q, k, v)
    torch.testing.assert_close(out.detach().cpu(), want, rtol=1e-5, atol=1e-5)
    for leaf, grad in zip(leaves, grads, strict=True):
        assert leaf.grad.device.type == "tpu"
        torch.testing.assert_close(leaf.grad.cpu(), grad, rtol=1e-4, atol=1e-5)


def test_the_cpu_still_refuses_its_backward():
    q = torch.ones(1, 1, 16, 8, requires_grad=True)
    with pytest.raises(NotImplementedError, match="FlexAttention does not support backward on CPU"):
        flex_attention(q, q, q)
