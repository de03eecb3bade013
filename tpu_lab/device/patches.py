"""Every change tpu_lab makes to torch's own objects, in one place (each has a test in
tests/test_patches.py).

PyTorch sees the compiled core as a real backend, so only what TorchTPU itself changes is
changed, and only for "tpu": code that never uses the device runs as without tpu_lab.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Patch:
    target: str
    why: str


PATCHES = (
    Patch(
        "torch.compile",
        "as TorchTPU does, backend 'tpu' means dynamic=False unless the call sets it; every "
        "other call reaches torch.compile as written (compile_backend.py)",
    ),
    Patch(
        "torch._TorchCompileInductorWrapper.__call__",
        "Inductor (no backend, or backend 'inductor') given 'tpu' inputs lowers the graph "
        "through the device's backend, whose graphs Inductor compiles for the CPU; graphs "
        "without 'tpu' inputs reach Inductor untouched (compile_backend.py)",
    ),
    Patch(
        "torch._C._select_conv_backend, torch._C._conv_determine_backend_memory_format",
        "while tracing, ask which convolution backend the CPU would use for 'tpu' tensors, so "
        "traced strides match eager execution; other tensors are asked about as they are "
        "(compile_backend.py, from the first torch.compile for 'tpu')",
    ),
    Patch(
        "torch.set_float32_matmul_precision",
        "as TorchTPU's loader does, it also sets the TPU's global float32 matmul precision "
        "('medium' = DEFAULT, 'high' = HIGH, 'highest' = HIGHEST), after setting PyTorch's own "
        "as always; torch.get_float32_matmul_precision stays PyTorch's (modes.install)",
    ),
    Patch(
        "torch.nn.attention.flex_attention._validate_device",
        "as TorchTPU's loader does (_patch_flex_attention), 'tpu' inputs pass flex_attention's "
        "device check, with or without gradients; inputs on other devices are checked as "
        "always (flex_attention.py)",
    ),
    Patch(
        "torch.backends.tpu (a new module: torch.backends and sys.modules gain it)",
        "TorchTPU's tutorials set torch.backends.tpu.allow_excess_precision; it is the setting "
        "torch.tpu.allow_excess_precision holds, nothing else in torch.backends changes "
        "(backends_tpu.py)",
    ),
)
