"""Every change tpu_lab makes to torch's own objects is listed in tpu_lab.device.patches, and
each listed change is really made (and no other)."""

from __future__ import annotations

import pytest
import torch

import tpu_lab  # noqa: F401  (installs the "tpu" device)
from tpu_lab import device
from tpu_lab.device import patches


def test_torch_compile_changes_only_for_tpu(fresh_dynamo):
    assert {"torch.compile", "torch._TorchCompileInductorWrapper.__call__"} <= {
        p.target for p in patches.PATCHES
    }
    assert getattr(torch.compile, "_tpu_lab", False)
    x = torch.arange(3.0)
    # Inductor given "tpu" inputs lowers them through the device: the CPU's result
    assert torch.equal(torch.compile(lambda t: t * 2, backend="inductor")(x.tpu()).cpu(), x * 2)
    # CPU inputs: PyTorch's automatic dynamic shapes, 2 graphs for 4 sizes (issue 31)
    frames = torch._dynamo.testing.CompileCounterWithBackend("inductor")
    f = torch.compile(lambda t: t.sin() + 1, backend=frames)
    g = torch.compile(lambda t: t.cos() + 1)
    torch._dynamo.utils.counters.clear()
    for n in (2, 3, 4, 5):
        f(torch.ones(n))
        g(torch.ones(n))
    assert frames.frame_count == 2
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 4  # f's 2 and g's 2


def test_convolution_backend_is_asked_about_cpu_tensors_while_tracing(fresh_dynamo):
    conv = torch.nn.Conv2d(3, 4, 3).to("tpu").to(memory_format=torch.channels_last)
    x = torch.randn(1, 3, 8, 8).to("tpu").to(memory_format=torch.channels_last)
    compiled = torch.compile(conv, backend="tpu", fullgraph=True)
    assert torch.equal(compiled(x).cpu(), conv(x).cpu())
    assert torch._C._select_conv_backend.__module__ == "tpu_lab.device.compile_backend"
    assert compiled(x).stride() == conv(x).stride()


def test_float32_matmul_precision_sets_pytorchs_and_the_tpus():
    assert any(p.target == "torch.set_float32_matmul_precision" for p in patches.PATCHES)
    assert getattr(torch.set_float32_matmul_precision, "_tpu_lab", False)
    getter = torch.get_float32_matmul_precision.__code__.co_filename
    assert getter == torch.__file__  # PyTorch's own function, not a wrapper
    before = torch.get_float32_matmul_precision()
    tpu_before = device.current().precision
    try:
        torch.set_float32_matmul_precision("high")
        assert torch._C._get_float32_matmul_precision() == "high"  # PyTorch's own (CUDA: TF32)
        assert torch.get_float32_matmul_precision() == "high"
        assert device.current().precision == torch.tpu.Precision.HIGH
        with pytest.warns(UserWarning, match="fast is not one of 'highest', 'high', or 'medium'"):
            torch.set_float32_matmul_precision("fast")
        assert torch.get_float32_matmul_precision() == "high"
        assert device.current().precision == torch.tpu.Precision.HIGH
    finally:
        torch._C._set_float32_matmul_precision(before)
        device.current().set_global_precision(tpu_before)


def test_torch_backends_gains_only_the_tpu_module():
    import sys

    assert any(p.target.startswith("torch.backends.tpu") for p in patches.PATCHES)
    assert sys.modules["torch.backends.tpu"] is torch.backends.tpu
    assert [n for n in dir(torch.backends.tpu) if not n.startswith("_")] == [
        "allow_excess_precision"
    ]
    assert torch.backends.tpu.allow_excess_precision is torch.tpu.allow_excess_precision


def test_flex_attention_lets_only_tpu_inputs_through_its_device_check():
    from torch.nn.attention import flex_attention as module

    assert "torch.nn.attention.flex_attention._validate_device" in {
        p.target for p in patches.PATCHES
    }
    assert module._validate_device._tpu_lab
    q = torch.ones(1, 1, 4, 8, requires_grad=True)
    with pytest.raises(NotImplementedError, match="FlexAttention does not support backward on CPU"):
        module.flex_attention(q, q, q)
    module._validate_device(*(q.detach().to("tpu").requires_grad_() for _ in range(3)))


def test_no_torch_class_is_patched():
    assert [p.target for p in patches.PATCHES if "Tensor" in p.target or "Storage" in p.target] \
        == []  # fmt: skip
    assert torch.Generator is torch._C.Generator
    assert torch.Tensor.data_ptr is torch._C.TensorBase.data_ptr
    for name in ("copy_", "nbytes", "data_ptr", "_write_file", "_set_from_file"):
        assert getattr(torch.UntypedStorage, name) is getattr(torch._C.StorageBase, name), name
    for name in ("synchronize", "memory_stats", "empty_cache"):
        assert getattr(torch.accelerator, name).__module__.startswith("torch."), name
