"""``torch.nn.attention.flex_attention`` on "tpu", with gradients, as TorchTPU lets it run.

PyTorch's ``flex_attention`` checks its inputs' device first (``_validate_device``): it refuses
devices other than CUDA, CPU, XPU, HPU and MPS, and gradients on the CPU. TorchTPU replaces that
check when it loads (``torch_tpu/_internal/compile/__init__.py``, ``_patch_flex_attention``,
"Patches PyTorch flex_attention to support TPU tensors")::

    def _validate_device(query, key, value):
      if query.device.type != "tpu":
        original_validate(query, key, value)

The bundled device replaces it the same way and nothing else: ``flex_attention`` then runs
PyTorch's own implementation of its higher-order op on "tpu" (forward and backward), whose
forward gives the CPU's numbers bit for bit. TorchTPU also sends the simplest calls (no
``score_mod``, no auxiliary outputs) to ``scaled_dot_product_attention`` with the block mask as
a bias, for XLA; its numbers there are the TPU's, which the bundled device does not claim.
"""

from __future__ import annotations


def register() -> None:
    """Let "tpu" tensors through ``flex_attention``'s device check (once per process)."""
    from torch.nn.attention import flex_attention as module

    original = module._validate_device
    if getattr(original, "_tpu_lab", False):
        return

    def _validate_device(query, key, value):
        if query.device.type != "tpu":
            original(query, key, value)

    _validate_device._tpu_lab = True
    module._validate_device = _validate_device
