"""Faults real users cause: out of memory mid-load and mid-generation, Ctrl-C in the middle of a
generation or a compilation, corrupt weight files, mixed devices. After each one the error is
clear, HBM accounting is exact, no tensor leaks, and the device, eager mode and event log work."""

from __future__ import annotations

import gc

import pytest
import torch

import tpu_lab
from tpu_lab.device import current
from tpu_lab.events import log

transformers = pytest.importorskip("transformers")

from transformers import AutoModelForCausalLM, LogitsProcessor  # noqa: E402

from tpu_lab.models import save_tiny_llama  # noqa: E402

PROMPT = torch.tensor([[1, 5, 9, 14, 3]])


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    return save_tiny_llama(tmp_path_factory.mktemp("llama") / "tiny-llama")


@pytest.fixture
def v5e():
    """A 16 GiB v5e chip with nothing of other tests on it; checks nothing leaks."""
    gc.collect()
    previous = current().chip.topology.name
    tpu_lab.use_topology("v5e-1")
    base = current().chip.stats().live
    yield current().chip
    gc.collect()
    assert current().chip.stats().live == base, "tensors leaked on the device"
    tpu_lab.use_topology(previous)


def _fill(device_chip, leave: int) -> list[torch.Tensor]:
    """Hold all of the chip's HBM but ``leave`` bytes (untouched empty payloads: no host RAM)."""
    held = []
    while device_chip.stats().free - leave >= 1 << 30:
        held.append(torch.empty(1 << 30, dtype=torch.uint8, device="tpu"))
    rest = device_chip.stats().free - leave
    if rest > 0:
        held.append(torch.empty(rest, dtype=torch.uint8, device="tpu"))
    assert device_chip.stats().free == leave
    return held


def _model_bytes(path) -> int:
    model = AutoModelForCausalLM.from_pretrained(path)
    return sum(p.numel() * p.element_size() for p in model.parameters())


def _still_works() -> None:
    x = torch.arange(6.0, device="tpu").reshape(2, 3)
    assert torch.equal((x @ x.T).cpu(), torch.arange(6.0).reshape(2, 3) @ torch.arange(6.0).reshape(2, 3).T)


def test_out_of_memory_in_the_middle_of_from_pretrained(v5e, llama_dir):
    held = _fill(v5e, _model_bytes(llama_dir) // 2)
    ooms = v5e.stats().ooms
    with pytest.raises(torch.OutOfMemoryError, match="RESOURCE_EXHAUSTED: TPU out of memory"):
        AutoModelForCausalLM.from_pretrained(llama_dir, device_map="tpu")
    assert v5e.stats().ooms == ooms + 1
    assert log.events("oom")[-1].details["nbytes"] > 0
    del held
    gc.collect()
    # nothing of the half-loaded model stays on the chip; the same load now succeeds
    model = AutoModelForCausalLM.from_pretrained(llama_dir, device_map="tpu")
    cpu = AutoModelForCausalLM.from_pretrained(llama_dir)
    assert torch.equal(model(PROMPT.to("tpu")).logits.cpu(), cpu(PROMPT).logits)
    del model
    _still_works()


def test_out_of_memory_in_the_middle_of_generate(v5e, llama_dir):
    model = AutoModelForCausalLM.from_pretrained(llama_dir, device_map="tpu")
    prompt = PROMPT.to("tpu")
    # room for a few decoding steps only: the KV cache grows until the chip is full
    held = _fill(v5e, 96 << 10)
    with pytest.raises(torch.OutOfMemoryError, match="Exceeded hbm capacity"):
        model.generate(prompt, max_new_tokens=200, do_sample=False)
    del held
    gc.collect()
    cpu = AutoModelForCausalLM.from_pretrained(llama_dir)
    tokens = model.generate(prompt, max_new_tokens=8, do_sample=False)
    assert torch.equal(tokens.cpu(), cpu.generate(PROMPT, max_new_tokens=8, do_sample=False))
    del model, prompt, tokens


class _CtrlC(LogitsProcessor):
    """Presses Ctrl-C after ``after`` decoding steps."""

    def __init__(self, after: int) -> None:
        self.after, self.calls = after, 0

    def __call__(self, input_ids, scores):
        self.calls += 1
        if self.calls > self.after:
            raise KeyboardInterrupt
        return scores


@pytest.mark.parametrize("mode", ["DEFER_NEVER", "DEFER_AND_FUSE"])
def test_ctrl_c_during_generate_leaves_mode_log_and_memory_consistent(v5e, llama_dir, mode):
    model = AutoModelForCausalLM.from_pretrained(llama_dir, device_map="tpu")
    prompt = PROMPT.to("tpu")
    before_mode = torch.tpu.eager_mode
    seq = log.events()[-1].seq if log.events() else 0
    with pytest.raises(KeyboardInterrupt), torch.tpu.set_eager_mode(
        getattr(torch.tpu.EagerMode, mode)
    ):
        model.generate(
            prompt, max_new_tokens=50, do_sample=False, logits_processor=[_CtrlC(after=3)]
        )
    assert torch.tpu.eager_mode == before_mode
    # the log keeps numbering in order, and new events are recorded after the interrupt
    x = torch.ones(2, device="tpu")
    x.sum().item()
    new = [e for e in log.events() if e.seq > seq]
    assert [e.seq for e in new] == sorted(e.seq for e in new)
    assert new[-1].kind == "sync"
    cpu = AutoModelForCausalLM.from_pretrained(llama_dir)
    tokens = model.generate(prompt, max_new_tokens=6, do_sample=False)
    assert torch.equal(tokens.cpu(), cpu.generate(PROMPT, max_new_tokens=6, do_sample=False))
    del model, prompt, tokens, x


def test_ctrl_c_during_compile_then_the_next_compile_works(fresh_dynamo, monkeypatch):
    from tpu_lab.device import compile_backend

    real = compile_backend._lower

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(compile_backend, "_lower", interrupted)
    f = torch.compile(lambda x: (x * 3).sin(), backend="tpu", fullgraph=True, dynamic=False)
    x = torch.arange(4.0, device="tpu")
    with pytest.raises(KeyboardInterrupt):
        f(x)
    monkeypatch.setattr(compile_backend, "_lower", real)
    torch._dynamo.reset()
    g = torch.compile(lambda x: (x * 3).sin(), backend="tpu", fullgraph=True, dynamic=False)
    assert torch.equal(g(x).cpu(), (torch.arange(4.0) * 3).sin())
    last = log.events("compile")[-1]
    assert last.details["failure"] is None and last.details["graph_ops"] == 2


def test_corrupt_weights_file_gives_a_clear_error(tmp_path, llama_dir):
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(llama_dir, broken)
    weights = broken / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 3])
    with pytest.raises(Exception, match="(?i)safetensors|deserializ|incomplete|header") as info:
        AutoModelForCausalLM.from_pretrained(broken, device_map="tpu")
    assert not isinstance(info.value, torch.OutOfMemoryError)
    _still_works()


def test_mixing_devices_names_the_fix():
    with pytest.raises(RuntimeError) as info:
        torch.ones(3, device="tpu") + torch.ones(3)
    assert str(info.value) == (
        "Expected all tensors to be on the same device, but found at least two devices, tpu:0 "
        "and cpu! Move the CPU tensor with .to('tpu') (or the 'tpu' one with .cpu())."
    )  # the Trainer's setting only where accelerate is involved (a notebook's retelling)


def test_float64_works_as_on_torchtpu():
    """TorchTPU accepts float64 (XLA emulates it on TPU); so does the bundled device."""
    x = torch.linspace(0, 1, 7, dtype=torch.float64)
    assert torch.equal((x.to("tpu").exp() * 3).cpu(), x.exp() * 3)
