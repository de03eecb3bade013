"""Numerics: the MXU model of float32 matmuls (against float64), TorchTPU's tracing tools, and
per-layer parity of "tpu" with the CPU."""

from __future__ import annotations

import pytest
import torch

import tpu_lab  # noqa: F401  (the "tpu" device)
from tpu_lab.device.modes import Precision
from tpu_lab.numerics import (
    ActivationTracer,
    OpTracer,
    get_tensor_summary,
    model_memory,
    mxu,
    mxu_matmul,
    parity,
)


def _pair(m, k, n, seed=0, positive=False):
    g = torch.Generator().manual_seed(seed)
    draw = torch.rand if positive else torch.randn
    return draw(m, k, generator=g), draw(k, n, generator=g)


def test_split_parts_are_bfloat16_values_that_sum_back():
    a, _ = _pair(32, 32, 1)
    parts = mxu.split(a)
    for p in parts:
        assert torch.equal(p, p.to(torch.bfloat16).to(torch.float32))
    assert torch.equal(parts[0] + parts[1] + parts[2], a) or (
        (parts[0].double() + parts[1] + parts[2] - a.double()).abs().max() < 1e-30
    )


def test_default_is_one_bfloat16_pass_with_float32_accumulation():
    a, b = _pair(64, 256, 48)
    model = a.to(torch.bfloat16).float() @ b.to(torch.bfloat16).float()
    assert torch.equal(mxu_matmul(a, b, Precision.DEFAULT), model)


def test_default_error_against_float64_is_the_bfloat16_model_within_1_ulp():
    a, b = _pair(64, 8, 64, positive=True)  # no cancellation: one ulp of the result is meaningful
    exact_model = a.to(torch.bfloat16).double() @ b.to(torch.bfloat16).double()
    emulated = mxu_matmul(a, b, Precision.DEFAULT).double()
    true = a.double() @ b.double()
    within = (emulated - true) - (exact_model - true)
    assert within.abs().le(mxu.ulp(exact_model).double()).all()
    # and the error is bfloat16's: about 2^-9 relative per input, far above float32's
    rel = ((emulated - true).abs() / true.abs()).mean().item()
    assert 1e-4 < rel < 4e-3


def test_default_error_stays_within_float32_accumulation_of_the_model():
    a, b = _pair(96, 512, 80, seed=3)
    exact_model = a.to(torch.bfloat16).double() @ b.to(torch.bfloat16).double()
    scale = a.to(torch.bfloat16).double().abs() @ b.to(torch.bfloat16).double().abs()
    error = (mxu_matmul(a, b, Precision.DEFAULT).double() - exact_model).abs()
    assert (error <= 512 * 2.0**-24 * scale).all()


def test_highest_is_the_cpu_float32_product_bit_for_bit():
    a, b = _pair(64, 300, 40, seed=1)
    assert torch.equal(mxu_matmul(a, b, Precision.HIGHEST), a @ b)
    six = mxu.passes(torch.matmul, a, b, Precision.HIGHEST)
    true = a.double() @ b.double()
    assert (six.double() - true).abs().max() <= 4 * ((a @ b).double() - true).abs().max() + 1e-6


def test_errors_shrink_with_precision_as_torchtpus_tutorial_shows():
    a, b = _pair(128, 1024, 128, seed=2)
    true = a.double() @ b.double()
    err = {p: (mxu_matmul(a, b, p).double() - true).abs().max().item() for p in Precision}
    assert err[Precision.DEFAULT] > 100 * err[Precision.HIGH] > 0
    assert err[Precision.HIGH] > err[Precision.HIGHEST]


def test_bilinear_follows_torch_tpu_precision_and_leaves_other_dtypes_alone():
    a, b = _pair(16, 64, 16)
    with torch.tpu.precision(Precision.HIGHEST):
        assert torch.equal(mxu.bilinear(torch.mm, a, b), a @ b)
    with torch.tpu.precision(Precision.DEFAULT):
        assert not torch.equal(mxu.bilinear(torch.mm, a, b), a @ b)
    x = torch.randn(1, 2, 8, 8)
    w = torch.randn(3, 2, 3, 3)
    conv = mxu.bilinear(torch.nn.functional.conv2d, x, w, Precision.DEFAULT, padding=1)
    expect = torch.nn.functional.conv2d(
        x.bfloat16().float(), w.bfloat16().float(), padding=1
    )
    assert torch.equal(conv, expect)
    h = a.bfloat16()
    assert torch.equal(mxu.bilinear(torch.mm, h, b.bfloat16(), Precision.DEFAULT), h @ b.bfloat16())


def test_emulation_switch_and_environment(monkeypatch):
    previous = mxu.emulate(True)
    assert mxu.ACTIVE is True
    mxu.emulate(previous)
    monkeypatch.setenv(mxu.NUMERICS_ENV, "gpu")
    with pytest.raises(ValueError, match="TPU_LAB_NUMERICS='gpu' is not valid"):
        mxu._read_env()


def test_op_tracer_counts_aten_ops_on_tpu():
    x = torch.ones(4, device="tpu")
    with OpTracer() as tracer:
        (x * 2).sum()
    assert tracer.ops_log["aten"] == {"aten.mul.Tensor": 1, "aten.sum.default": 1}
    assert tracer.num_atens() == 2
    assert tracer._pformat().splitlines()[0] == "Ops for namespace: 'aten' (2 ops)"


def test_activation_tracer_logs_forward_and_backward_with_depth():
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU()).to("tpu")
    with ActivationTracer(model) as tracer:
        model(torch.ones(2, 3, device="tpu")).sum().backward()
    assert [type(e["module"]).__name__ for e in tracer.forward_log] == [
        "Linear", "ReLU", "Sequential"]  # fmt: skip
    assert [e["depth"] for e in tracer.forward_log] == [1, 1, 0]
    assert len(tracer.backward_log) == 3
    assert "Linear: (2, 4)" in tracer.pformat()
    assert not model._forward_hooks and not model[0]._forward_hooks


def test_tensor_summary_and_model_memory_as_torchtpu_writes_them():
    t = torch.tensor([[1.0, 2.0], [3.0, 4.0]], device="tpu")
    assert get_tensor_summary(t) == (
        "(2, 2)  Min: 1.00  Max: 4.00  Mean: 2.50  Var: 1.25  Grad:N  float32  tpu:0"
    )
    assert get_tensor_summary(t, data=False) == (
        "torch.tensor(...(2, 2), dtype=torch.float32, device='tpu:0')"
    )
    assert model_memory(torch.nn.Linear(1024, 1024)) == pytest.approx(
        2 * (1024 * 1024 + 1024) * 4 / 1024**3
    )


def test_parity_is_bitwise_on_the_bundled_device_forward_and_backward():
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Sequential(torch.nn.Linear(16, 4))
    )
    report = parity(model, torch.randn(3, 8))
    assert report.bitwise and report.simulated
    assert [r.name for r in report.rows] == ["(model)", "0", "1", "2", "2.0"]
    text = report.to_text(width=120)
    assert text.splitlines()[0] == (
        "parity: the bundled (simulated) device vs CPU, 5 modules: bitwise equal"
    )
    assert "    2.0  Linear      3x4     0           0        0            0" in text
    assert "<table>" in report.to_html()


def test_parity_shows_where_emulated_tpu_numerics_part_from_the_cpu(monkeypatch):
    """With the MXU model standing in for the device's matmul, the Linear layers differ."""
    real_linear = torch.nn.functional.linear

    def linear(x, w, b=None):
        if x.device.type != "tpu":
            return real_linear(x, w, b)
        out = mxu.bilinear(torch.matmul, x.cpu(), w.cpu().t(), Precision.DEFAULT)
        return (out if b is None else out + b.cpu()).to("tpu")

    monkeypatch.setattr(torch.nn.functional, "linear", linear)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Tanh())
    report = parity(model, torch.randn(4, 64), backward=False)
    linear_row = report.rows[1]
    assert not report.bitwise
    assert 1e-5 < linear_row.forward_rel < 1e-1
    assert "grad" not in report.to_text().splitlines()[1]


TRACERS = '''
import sys, warnings
warnings.simplefilter("ignore")
import torch
if sys.argv[1] == "ours":
    import tpu_lab  # noqa: F401  (installs the torch_tpu stand-in)
from torch_tpu._internal.utils import tracer_utils, utils

torch.manual_seed(0)
inner = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ModuleList([torch.nn.ReLU()]))

class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = inner
    def forward(self, x, scale=2.0):
        return self.inner[1][0](self.inner[0](x)) * scale

m, x = M(), torch.randn(2, 3)
with utils.ActivationTracer(m) as tracer:
    m(x, scale=3.0)
print(tracer_utils.pformat_activation_tracer(tracer))
with utils.OpTracer() as ops:
    (x * 2).sum().sqrt()
print(tracer_utils.pformat_op_tracer(ops), ops.num_atens())
print(utils.get_tensor_summary(x), utils.get_tensor_summary(x, data=False))
print(utils.format_tensor(x, "desc"))
print(utils.model_memory(m, torch.bfloat16))
replayed = tracer_utils.replay_log(tracer.forward_log, "cpu")
text = tracer_utils.pformat_replay(tracer.forward_log, tracer.forward_pre_log, replayed)
print("\\n".join(line for line in text.splitlines() if "time" not in line and "Duration" not in line))
'''


def test_tracer_tools_print_exactly_as_torchtpus(tmp_path):
    """The same script through the real torch-tpu 0.2.0 and through the stand-in (CPU tensors,
    so that both can run it): the same text, line for line (times left out)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    python = os.environ.get("TPU_LAB_TORCHTPU_PYTHON", str(root / ".venv-torchtpu/bin/python"))
    if not Path(python).exists():
        pytest.skip("no torch-tpu environment: run scripts/setup_torchtpu_env.sh")
    script = tmp_path / "tracers.py"
    script.write_text(TRACERS)
    env = {**os.environ, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0", "PYTHONPATH": str(root)}
    real, ours = (
        subprocess.run([exe, str(script), which], capture_output=True, text=True, env=env,
                       timeout=300)  # fmt: skip
        for exe, which in ((python, "real"), (sys.executable, "ours"))
    )
    assert real.returncode == 0, real.stderr[-2000:]
    assert ours.returncode == 0, ours.stderr[-2000:]
    assert "+- Linear END (#2)" in real.stdout and "Delta:" in real.stdout
    assert ours.stdout == real.stdout


def test_replaying_tpu_activations_on_the_cpu_shows_zero_deltas():
    from tpu_lab.numerics.tracer_utils import pformat_replay, replay_log

    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Tanh()).to("tpu")
    with ActivationTracer(model) as tracer:
        model(torch.randn(2, 4).to("tpu"))
    replayed = replay_log(tracer.forward_log, "cpu")
    text = pformat_replay(tracer.forward_log, tracer.forward_pre_log, replayed)
    deltas = [line for line in text.splitlines() if line.startswith("  Delta:")]
    assert len(deltas) == 3
    assert all("Min: 0.00  Max: 0.00" in line and line.endswith("float32  cpu") for line in deltas)
