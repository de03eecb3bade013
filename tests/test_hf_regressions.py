"""What Hugging Face's own test suites found on the bundled device (scripts/run_hf_suites.py).

A device bug they exposed is reduced here to a few lines of torch, first as
``xfail(strict=True)`` with the reason, then as a plain test once fixed: ``torch.tpu.Stream``
was not a ``torch.Stream``, so ``Tensor.record_stream`` refused it (Diffusers' group offloading
with ``record_stream=True``); ``torch.tpu`` had no ``_initialized``, so gradient checkpointing
did not replay the device's random draws (fixed); the "tpu" attention kernel choice failed on
symbolic shapes under ``torch.compile(dynamic=True)`` (fixed). Streams and ``record_stream`` need the compiled core (the
pure-Python core has neither pinned memory nor a ``record_stream`` kernel). The other tests pin
down the differences that are *not* device bugs: the bundled device behaves there as TorchTPU
does, and the suites' outcome follows from that.
"""

from __future__ import annotations

import warnings

import pytest
import torch


def _blocks(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)

    class Blocks(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = torch.nn.ModuleList([torch.nn.Linear(8, 8) for _ in range(3)])

        def forward(self, x):
            for block in self.blocks:
                x = block(x)
            return x

    return Blocks()


def test_tpu_stream_is_a_torch_stream_and_record_stream_accepts_it():
    """TorchTPU's TpuStream subclasses torch.Stream: Tensor.record_stream(torch.tpu.Stream())
    works (Diffusers' group offloading with record_stream=True calls it)."""
    stream = torch.tpu.Stream()
    assert isinstance(stream, torch.Stream)
    torch.ones(2, device="tpu").record_stream(stream)
    torch.ones(2, device="tpu").record_stream(torch.tpu.default_stream())


def test_record_stream_with_the_accelerator_stream_works():
    torch.ones(2, device="tpu").record_stream(torch.accelerator.current_stream())


def test_diffusers_group_offloading_without_streams_is_bitwise_the_cpu():
    from diffusers.hooks import apply_group_offloading

    x = torch.randn(2, 8)
    reference = _blocks()(x)
    for kwargs in (
        dict(offload_type="block_level", num_blocks_per_group=1),
        dict(offload_type="leaf_level"),
    ):
        model = _blocks()
        apply_group_offloading(
            model, onload_device=torch.device("tpu"), offload_device=torch.device("cpu"), **kwargs
        )
        assert torch.equal(model(x.to("tpu")).cpu(), reference)


def test_diffusers_group_offloading_with_streams_needs_torchtpus_legacy_apis(
    monkeypatch
):
    """Diffusers' streamed group offloading calls ``torch.tpu.current_stream()``, which TorchTPU
    (on torch >= 2.11) reserves to PyTorch itself: the same error here as on a TPU VM, and the
    same way out, ``TORCH_TPU_ALLOW_LEGACY_DEVICE_APIS=1``. (Diffusers' own Memory tests
    ``test_group_offloading*`` fail on "tpu" for this reason.)"""
    x = torch.randn(2, 8)
    reference = _blocks()(x)
    with pytest.raises(RuntimeError, match="current_stream is internal to TorchTPU"):
        _offloaded_with_streams()(x.to("tpu"))
    monkeypatch.setenv("TORCH_TPU_ALLOW_LEGACY_DEVICE_APIS", "1")
    with warnings.catch_warnings():  # TorchTPU's one-time "<TorchTpu/ApiStage/InternalApi/>"
        warnings.simplefilter("ignore")
        out = _offloaded_with_streams()(x.to("tpu"))
    assert torch.equal(out.cpu(), reference)


def _offloaded_with_streams(**kwargs) -> torch.nn.Module:
    from diffusers.hooks import apply_group_offloading

    model = _blocks()
    apply_group_offloading(
        model,
        onload_device=torch.device("tpu"),
        offload_device=torch.device("cpu"),
        use_stream=True,
        **(kwargs or dict(offload_type="block_level", num_blocks_per_group=1)),
    )
    return model


def test_diffusers_group_offloading_with_record_stream(monkeypatch):
    """Diffusers' own ``test_group_offloading[True]`` and ``..._with_layerwise_casting[*-True]``
    failed here, behind the legacy-API error, with "unknown parameter type"."""
    x = torch.randn(2, 8)
    reference = _blocks()(x)
    monkeypatch.setenv("TORCH_TPU_ALLOW_LEGACY_DEVICE_APIS", "1")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = _offloaded_with_streams(offload_type="leaf_level", record_stream=True)
        out = model(x.to("tpu"))
    assert torch.equal(out.cpu(), reference)


def test_safetensors_refuses_the_tpu_device_name_as_on_torchtpu(tmp_path):
    """Diffusers' group offloading to disk with streams loads with
    ``safetensors.torch.load_file(path, device=onload_device)``; safetensors only knows the
    device names it lists (cpu, cuda, mps, xpu, npu, ...), so "tpu" fails on a TPU VM too."""
    import safetensors
    import safetensors.torch

    path = tmp_path / "t.safetensors"
    safetensors.torch.save_file({"a": torch.ones(2)}, str(path))
    with pytest.raises(safetensors.SafetensorError, match="device tpu is invalid"):
        safetensors.torch.load_file(str(path), device="tpu")


@pytest.mark.parametrize("use_reentrant", [False, True])
def test_gradient_checkpointing_replays_the_devices_random_draws(use_reentrant):
    """``torch.utils.checkpoint`` stashes the device's RNG state in the forward and restores it
    before recomputing in the backward, so dropout draws the same mask twice and the gradients
    equal those without checkpointing -- but only if ``torch.<device>._initialized`` is true, as
    ``torch.cuda._initialized`` is. ``torch.tpu`` had no ``_initialized``: the recompute drew new
    masks. (Diffusers' ``TestDiTTransformer2DTraining::test_gradient_checkpointing_equivalence``
    passed on the CPU and failed on "tpu": DiT's label embedding drops class labels at random.)"""
    from torch.utils.checkpoint import checkpoint

    def f(x):
        return torch.nn.functional.dropout(x, 0.5, training=True) * 2

    x = torch.ones(1000, device="tpu", requires_grad=True)
    torch.manual_seed(0)
    f(x).sum().backward()
    plain, x.grad = x.grad.cpu(), None
    torch.manual_seed(0)
    checkpoint(f, x, use_reentrant=use_reentrant).sum().backward()
    assert torch.equal(x.grad.cpu(), plain)


def test_sdpa_traces_with_dynamic_shapes():
    """Dynamo runs every op of the graph on fake tensors; with ``dynamic=True`` their sizes are
    symbolic. "tpu"'s ``scaled_dot_product_attention`` picks its kernel the CPU's way, and once
    failed there: it asked the CPU with twin tensors of the same metadata, which cannot hold
    symbolic sizes ("Cannot call storage_offset() on tensor with symbolic sizes/strides" in the
    compiled core, "SymIntArrayRef expected to contain only concrete integers" in the Python
    one), so Diffusers' Flux ``TestFluxTransformerCompile::test_compile_on_different_shapes``
    failed on "tpu" before any backend ran. The CPU's choice now reads the fake tensors
    themselves: one graph serves both sizes, with the CPU's numbers. (A counting backend, not
    TorchTPU's, which refuses ``dynamic=True``.)"""
    from torch._dynamo.testing import CompileCounter

    torch._dynamo.reset()
    counter = CompileCounter()
    f = torch.compile(
        lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(q, k, v),
        backend=counter,
        fullgraph=True,
        dynamic=True,
    )
    for shape in ((2, 3, 8, 16), (4, 5, 12, 16)):  # distinct sizes, none 1: no specialization
        q, k, v = (torch.randn(shape) for _ in range(3))
        reference = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        assert torch.equal(f(q.to("tpu"), k.to("tpu"), v.to("tpu")).cpu(), reference), shape
    assert counter.frame_count == 1
