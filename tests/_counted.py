"""PyTorch's FLOP counter, as a reference for the estimate's FLOPs. It has no formula for the
CPU's fused attention kernel (``_scaled_dot_product_flash_attention_for_cpu`` and its
backward), which the bundled device and the estimate run; :func:`counter` gives it the formula
of the CUDA kernel that computes the same thing, as the estimate counts it."""

from __future__ import annotations

import torch
from torch.utils.flop_counter import FlopCounterMode, flop_registry

aten = torch.ops.aten
_SAME = {
    aten._scaled_dot_product_flash_attention_for_cpu: aten._scaled_dot_product_flash_attention,
    aten._scaled_dot_product_flash_attention_for_cpu_backward:
        aten._scaled_dot_product_flash_attention_backward,
}


def counter() -> FlopCounterMode:
    return FlopCounterMode(display=False, custom_mapping={
        cpu: flop_registry[cuda].__wrapped__ for cpu, cuda in _SAME.items()})
