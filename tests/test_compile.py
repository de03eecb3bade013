"""``torch.compile(backend="tpu")`` on the bundled device."""

from __future__ import annotations

import warnings

import pytest
import torch

import tpu_lab  # noqa: F401


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(32)
        self.up = torch.nn.Linear(32, 64)
        self.down = torch.nn.Linear(64, 32)

    def forward(self, x):
        h = self.down(torch.nn.functional.gelu(self.up(self.norm(x))))
        return x + h * torch.arange(32, device=x.device)  # a factory op inside the graph


@pytest.fixture
def models():
    torch.manual_seed(0)
    cpu = Block()
    tpu = Block()
    tpu.load_state_dict(cpu.state_dict())
    return cpu, tpu.tpu()


@pytest.mark.parametrize("lowering", ["aten", "inductor"])
def test_compiled_forward_and_backward(models, lowering, use_lowering):
    use_lowering(lowering)
    torch._dynamo.reset()
    cpu, tpu = models
    x = torch.randn(4, 32)
    compiled = torch.compile(tpu, backend="tpu", fullgraph=True)
    out = compiled(x.tpu())
    assert out.is_tpu
    # aten: the ATen graph runs the CPU's kernels, so it equals CPU eager bitwise;
    # inductor: the same graph compiled by Inductor for the CPU, so it equals CPU Inductor.
    reference = cpu if lowering == "aten" else torch.compile(cpu, backend="inductor")
    ref = reference(x)
    assert torch.equal(out.cpu(), ref)
    out.square().sum().backward()
    ref.square().sum().backward()
    assert tpu.up.weight.grad.is_tpu
    for p_cpu, p_tpu in zip(cpu.parameters(), tpu.parameters(), strict=True):
        assert torch.equal(p_tpu.grad.cpu(), p_cpu.grad)


def test_backend_tpu_defaults_to_static_shapes(models):
    torch._dynamo.reset()
    _, tpu = models
    counts = []
    compiled = torch.compile(
        tpu,
        backend="tpu",
        fullgraph=True,
    )
    torch._dynamo.utils.counters.clear()
    for n in (2, 3, 4):
        compiled(torch.randn(n, 32, device="tpu"))
        counts.append(torch._dynamo.utils.counters["stats"]["unique_graphs"])
    assert counts == [1, 2, 3]  # one graph per shape: dynamic=False, as on TorchTPU


def test_compile_without_backend_uses_tpu_for_tpu_inputs(models):
    torch._dynamo.reset()
    cpu, tpu = models
    before = torch.tpu._hbm_usage_summary()
    out = torch.compile(tpu)(torch.ones(2, 32, device="tpu"))
    assert out.is_tpu
    assert torch.tpu._hbm_usage_summary() != before  # one more "tpu" executable
    assert torch.equal(
        torch.compile(cpu)(torch.ones(2, 32)),
        torch.compile(cpu, backend="inductor")(torch.ones(2, 32)),
    )


def test_inductor_given_tpu_inputs_compiles_through_the_device(models):
    torch._dynamo.reset()
    cpu, tpu = models
    x = torch.randn(2, 32)
    out = torch.compile(tpu, backend="inductor", mode="reduce-overhead")(x.tpu())
    assert out.is_tpu
    assert torch.equal(out.cpu(), torch.compile(cpu, backend="inductor")(x))


def test_dynamic_true_is_refused_for_tpu_inputs_as_in_torchtpu(models):
    torch._dynamo.reset()
    _, tpu = models
    with pytest.raises(Exception, match="TPU backend does not support torch.compile"):
        torch.compile(tpu, backend="tpu", dynamic=True)(torch.ones(2, 32, device="tpu"))


def test_the_lowering_is_read_once_and_a_block_chooses_it(monkeypatch):
    from tpu_lab.device import compile_backend

    chosen = compile_backend._lowering()  # TPU_LAB_COMPILE_LOWERING, read at the first use
    other = "aten" if chosen == "inductor" else "inductor"
    monkeypatch.setenv(compile_backend.LOWERING_ENV, other)
    assert compile_backend._lowering() == chosen
    with compile_backend.lowering(other):
        assert compile_backend._lowering() == other
        with pytest.raises(KeyError), compile_backend.lowering(chosen):
            assert compile_backend._lowering() == chosen
            raise KeyError("the block raised")
        assert compile_backend._lowering() == other
    assert compile_backend._lowering() == chosen
    with pytest.raises(ValueError, match="lowering must be 'inductor' or 'aten', got 'gcc'"):
        compile_backend.lowering("gcc").__enter__()


def test_cpu_inputs_to_a_tpu_compiled_function_run_on_the_chip_and_say_so(use_lowering):
    """As TorchTPU's static compiler takes them (docs/compatibility/torchtpu.md quotes its
    source): the graph runs on the chip, the result is on "tpu"; a warning names the inputs."""
    use_lowering("aten")
    f = torch.compile(lambda x, y: x * y, backend="tpu")
    with pytest.warns(UserWarning) as caught:
        out = f(torch.ones(3), torch.full((3,), 2.0))
    assert out.device.type == "tpu" and torch.equal(out.cpu(), torch.full((3,), 2.0))
    assert str(caught[0].message) == (
        "A function compiled with backend='tpu' was given CPU tensors (x, y). As on TorchTPU, "
        "the graph runs on the chip: those tensors are copied to it on every call, and the "
        "results are on 'tpu'. Move them once with .to('tpu') (a model: model.to('tpu')), or "
        "compile without backend='tpu' to run on the CPU."
    )
    model = torch.compile(torch.nn.Linear(4, 2), backend="tpu")
    with pytest.warns(UserWarning, match=r"CPU tensors \(weight, bias, args\[0\]\)"):
        model(torch.ones(1, 4))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # all on "tpu": nothing to say
        f(torch.ones(3, device="tpu"), torch.ones(3, device="tpu"))
    torch._dynamo.reset()
