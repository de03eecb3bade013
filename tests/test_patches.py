"""Every change tpu_lab makes to torch's own objects is listed in tpu_lab.device.patches, and
each listed change is really made (and no other where the compiled core runs)."""

from __future__ import annotations

import pytest
import torch

import tpu_lab  # noqa: F401  (installs the "tpu" device)
from tpu_lab import device
from tpu_lab.device import patches


def test_torch_compile_is_wrapped_as_torchtpu_wraps_it(fresh_dynamo):
    assert any(p.target == "torch.compile" for p in patches.ALWAYS)
    assert getattr(torch.compile, "_tpu_lab", False)
    x = torch.ones(3, device="tpu")
    with pytest.raises(Exception, match="backend='inductor'\\) on TPU is experimental"):
        torch.compile(lambda t: t * 2, backend="inductor")(x)


def test_convolution_backend_is_asked_about_cpu_tensors_while_tracing(fresh_dynamo):
    conv = torch.nn.Conv2d(3, 4, 3).to("tpu").to(memory_format=torch.channels_last)
    x = torch.randn(1, 3, 8, 8).to("tpu").to(memory_format=torch.channels_last)
    compiled = torch.compile(conv, backend="tpu", fullgraph=True)
    assert torch.equal(compiled(x).cpu(), conv(x).cpu())
    assert torch._C._select_conv_backend.__module__ == "tpu_lab.device.compile_backend"
    assert compiled(x).stride() == conv(x).stride()


def test_float32_matmul_precision_is_the_tpus_as_torchtpu_makes_it():
    assert any("set_float32_matmul_precision" in p.target for p in patches.ALWAYS)
    assert getattr(torch.set_float32_matmul_precision, "_tpu_lab", False)
    cpu_setting = torch._C._get_float32_matmul_precision()
    before = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("high")
        assert torch.get_float32_matmul_precision() == "high"
        assert device.modes.current_precision() == torch.tpu.Precision.HIGH
        assert torch._C._get_float32_matmul_precision() == cpu_setting  # the CPU's: untouched
        with pytest.raises(ValueError, match="one of 'highest', 'high', or 'medium'"):
            torch.set_float32_matmul_precision("fast")
    finally:
        torch.set_float32_matmul_precision(before)


def test_the_compiled_core_patches_no_torch_class():
    if device.CORE.name != "compiled":
        pytest.skip("the Python core's patches are tested below")
    assert torch.Generator is torch._C.Generator
    assert torch.Tensor.data_ptr is torch._C.TensorBase.data_ptr
    for name in ("copy_", "nbytes", "data_ptr", "_write_file", "_set_from_file"):
        assert getattr(torch.UntypedStorage, name) is getattr(torch._C.StorageBase, name), name
    for name in ("synchronize", "memory_stats", "empty_cache"):
        assert getattr(torch.accelerator, name).__module__.startswith("torch."), name


@pytest.mark.usefixtures("python_core")
def test_the_python_core_makes_exactly_the_listed_patches():
    assert len(patches.PYTHON_CORE) == 3
    assert torch.Generator is not torch._C.Generator
    assert torch.Tensor.data_ptr is not torch._C.TensorBase.data_ptr
    for name in ("copy_", "nbytes", "data_ptr", "_write_file", "_set_from_file"):
        assert getattr(torch.UntypedStorage, name) is not getattr(torch._C.StorageBase, name)
    assert torch.accelerator.synchronize.__module__ == "tpu_lab.device.accelerator"
