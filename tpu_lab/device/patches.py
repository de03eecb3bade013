"""Every change tpu_lab makes to torch's own objects, in one place (each has a test in
tests/test_patches.py).

With the compiled core, PyTorch sees a real backend and only what TorchTPU itself changes is
changed (``ALWAYS``). The pure-Python core, which PyTorch cannot see as a backend in C++, also
needs ``PYTHON_CORE``: without C++ hooks, storages have no bytes of their own, generators and
``torch.accelerator``'s memory functions have no device to ask.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Patch:
    target: str
    why: str


ALWAYS = (
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
)

PYTHON_CORE = (
    Patch(
        "torch.UntypedStorage (cpu, to, nbytes, size, data_ptr, __new__), Tensor.data_ptr",
        "a Python backend's storages hold no bytes: serialization and safetensors need the "
        "payload's (storage.py)",
    ),
    Patch(
        "torch.Generator",
        "PrivateUse1 generators come from C++ hooks a Python backend cannot provide "
        "(generator.py)",
    ),
    Patch(
        "torch.accelerator: memory_stats, get_memory_info, reset_peak_memory_stats, "
        "reset_accumulated_memory_stats, empty_cache, synchronize",
        "PyTorch's Python device guard cannot synchronize and has no allocator to ask "
        "(accelerator.py)",
    ),
)


def install_python_core() -> None:
    """The patches the pure-Python core needs (the compiled core needs none of them)."""
    from . import accelerator, generator, storage

    storage.install()
    accelerator.install()
    generator.install()
