"""``dropout`` on "tpu": the CPU's decomposition, so the numbers are the CPU's (both cores)."""

from __future__ import annotations

import torch


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
