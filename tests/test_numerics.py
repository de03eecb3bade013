"""Numerics: the MXU model of float32 matmuls (against float64), the device's matmuls and
convolutions through it while the TPU numerics emulation is on (both cores: ``make test`` runs
this file again with ``TPU_LAB_CORE=python``), TorchTPU's tracing tools, and per-layer parity of
"tpu" with the CPU."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.nn import functional

import tpu_lab
from tpu_lab.device import current, emulation, mxu
from tpu_lab.device.modes import Precision
from tpu_lab.numerics import (
    ActivationTracer,
    OpTracer,
    get_tensor_summary,
    model_memory,
    mxu_matmul,
    parity,
)

ROOT = Path(__file__).resolve().parents[1]


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
    previous = emulation.emulate(True)
    assert emulation.is_enabled()
    assert emulation.emulate(previous) is True
    assert emulation.is_enabled() is previous
    monkeypatch.setenv(emulation.NUMERICS_ENV, "gpu")
    with pytest.raises(ValueError, match="TPU_LAB_NUMERICS='gpu' is not valid"):
        emulation.requested_at_start()


@pytest.fixture
def emulated():
    """The TPU numerics emulation on for the test, restored after."""
    previous = emulation.emulate(True)
    yield
    emulation.emulate(previous)


def _bf16(t: torch.Tensor) -> torch.Tensor:
    """``t`` rounded to bfloat16, as float32 (the MXU's inputs at DEFAULT)."""
    return t.to(torch.bfloat16).float()


def test_off_the_device_matmul_is_the_cpus_bit_for_bit_whatever_the_precision():
    assert not emulation.is_enabled()
    a, b = _pair(64, 300, 40, seed=4)
    ta, tb = a.to("tpu"), b.to("tpu")
    assert torch.equal((ta @ tb).cpu(), a @ b)
    with torch.tpu.precision(Precision.DEFAULT):
        assert torch.equal((ta @ tb).cpu(), a @ b)


def test_emulated_default_device_matmul_error_is_the_bfloat16_model_within_1_ulp(emulated):
    """The issue's must-show, through the device's own op: a float32 matmul's error against
    float64 is bfloat16-input / float32-accumulate's within 1 ulp of that model."""
    a, b = _pair(64, 8, 64, positive=True)
    out = (a.to("tpu") @ b.to("tpu")).cpu()
    exact_model = _bf16(a).double() @ _bf16(b).double()
    true = a.double() @ b.double()
    within = (out.double() - true) - (exact_model - true)
    assert within.abs().le(mxu.ulp(exact_model).double()).all()
    assert torch.equal(out, _bf16(a) @ _bf16(b))  # bit for bit the model computed on the CPU
    rel = ((out.double() - true).abs() / true.abs()).mean().item()
    assert 1e-4 < rel < 4e-3  # bfloat16's error, far above float32's


def test_emulated_precisions_follow_torch_tpu_precision_and_the_global_setting(emulated):
    a, b = _pair(32, 256, 24, seed=5)
    ta, tb = a.to("tpu"), b.to("tpu")
    with torch.tpu.precision(Precision.HIGH):
        assert torch.equal((ta @ tb).cpu(), mxu.passes(torch.mm, a, b, Precision.HIGH))
        with torch.tpu.precision(Precision.HIGHEST):  # the innermost block wins
            assert torch.equal((ta @ tb).cpu(), a @ b)
    assert current().precision is Precision.DEFAULT  # TorchTPU's default
    pytorch_own = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    try:
        assert torch.equal(torch.mm(ta, tb).cpu(), a @ b)
        with torch.tpu.precision(Precision.DEFAULT):  # a block over the global setting
            assert torch.equal(torch.mm(ta, tb).cpu(), _bf16(a) @ _bf16(b))
    finally:
        torch.set_float32_matmul_precision("medium")
        torch._C._set_float32_matmul_precision(pytorch_own)
    with pytest.warns(UserWarning, match="low is not one of 'highest', 'high', or 'medium'"):
        torch.set_float32_matmul_precision("low")  # PyTorch's warning; nothing changes
    assert current().precision is Precision.DEFAULT
    h = a.to(torch.bfloat16)  # other dtypes: the CPU's kernel
    assert torch.equal((h.to("tpu") @ h.t().to("tpu")).cpu(), h @ h.t())


def test_emulated_batched_and_vector_products(emulated):
    g = torch.Generator().manual_seed(6)
    x, y = torch.randn(3, 5, 16, generator=g), torch.randn(3, 16, 4, generator=g)
    c, v = torch.randn(3, 5, 4, generator=g), torch.randn(16, generator=g)
    tx, ty, tc, tv = (t.to("tpu") for t in (x, y, c, v))
    assert torch.equal(torch.bmm(tx, ty).cpu(), torch.bmm(_bf16(x), _bf16(y)))
    assert torch.equal(
        torch.baddbmm(tc, tx, ty, beta=0.5, alpha=2).cpu(),
        torch.bmm(_bf16(x), _bf16(y)) * 2 + c * 0.5,
    )
    assert torch.equal(torch.einsum("bik,bkj->bij", tx, ty).cpu(), torch.bmm(_bf16(x), _bf16(y)))
    assert torch.equal((tx[0] @ tv).cpu(), _bf16(x[0]) @ _bf16(v))  # mv
    assert torch.equal((tv @ tv).cpu(), _bf16(v) @ _bf16(v))  # dot


def test_emulated_linear_and_its_backward(emulated):
    """nn.Linear forward (addmm, the bias added after the product) and backward (mm): each
    product at DEFAULT, bit for bit the CPU's on bfloat16-rounded operands."""
    torch.manual_seed(0)
    layer = torch.nn.Linear(16, 8)
    x = torch.randn(5, 7, 16)
    device_layer = torch.nn.Linear(16, 8).to("tpu")
    device_layer.load_state_dict(layer.state_dict())
    tx = x.to("tpu").requires_grad_()
    out = device_layer(tx)
    out.sum().backward()
    rx, rw = _bf16(x).requires_grad_(), _bf16(layer.weight.detach()).requires_grad_()
    rb = layer.bias.detach().clone().requires_grad_()
    reference = functional.linear(rx, rw, rb)
    reference.sum().backward()
    assert torch.equal(out.detach().cpu(), reference.detach())
    assert not torch.equal(out.detach().cpu(), layer(x).detach())
    assert torch.equal(tx.grad.cpu(), rx.grad)
    assert torch.equal(device_layer.weight.grad.cpu(), rw.grad)
    assert torch.equal(device_layer.bias.grad.cpu(), rb.grad)
    with torch.no_grad(), torch.tpu.precision(Precision.HIGHEST):
        assert torch.equal(device_layer(x.to("tpu")).cpu(), layer(x))


def test_emulated_conv2d_and_its_backward(emulated):
    g = torch.Generator().manual_seed(7)
    x, w = torch.randn(2, 3, 9, 9, generator=g), torch.randn(4, 3, 3, 3, generator=g)
    b = torch.randn(4, generator=g)
    tx, tw, tb = (t.to("tpu").requires_grad_() for t in (x, w, b))
    out = functional.conv2d(tx, tw, tb, padding=1)
    out.sum().backward()
    rx, rw, rb = (t.clone().requires_grad_() for t in (_bf16(x), _bf16(w), b))
    reference = functional.conv2d(rx, rw, None, padding=1) + rb.view(1, -1, 1, 1)
    reference.sum().backward()
    assert torch.equal(out.detach().cpu(), reference.detach())
    assert torch.equal(tx.grad.cpu(), rx.grad) and torch.equal(tw.grad.cpu(), rw.grad)
    assert torch.equal(tb.grad.cpu(), rb.grad)
    with torch.tpu.precision(Precision.HIGHEST):
        assert torch.equal(
            functional.conv2d(x.to("tpu"), w.to("tpu"), b.to("tpu")).cpu(),
            functional.conv2d(x, w, b),
        )
    wt, bt = torch.randn(3, 2, 3, 3, generator=g), torch.randn(2, generator=g)
    transposed = functional.conv_transpose2d(x.to("tpu"), wt.to("tpu"), bt.to("tpu"), stride=2)
    expect = functional.conv_transpose2d(_bf16(x), _bf16(wt), None, stride=2)
    assert torch.equal(transposed.cpu(), expect + bt.view(1, -1, 1, 1))


def test_emulated_attention_runs_its_matmuls_on_the_mxu_model(emulated):
    g = torch.Generator().manual_seed(8)
    q, k, v = (torch.randn(2, 4, 6, 8, generator=g) for _ in range(3))
    cpu = functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    true = functional.scaled_dot_product_attention(
        q.double(), k.double(), v.double(), is_causal=True
    )
    tq, tk, tv = (t.to("tpu").requires_grad_() for t in (q, k, v))
    out = functional.scaled_dot_product_attention(tq, tk, tv, is_causal=True)
    out.sum().backward()
    error = (out.detach().cpu().double() - true).abs().max().item()
    assert error > 100 * (cpu.double() - true).abs().max().item()
    assert 1e-4 < error < 5e-2  # bfloat16 inputs, float32 sums
    assert all(torch.isfinite(t.grad.cpu()).all() for t in (tq, tk, tv))
    with torch.tpu.precision(Precision.HIGHEST):
        highest = functional.scaled_dot_product_attention(
            q.to("tpu"), k.to("tpu"), v.to("tpu"), is_causal=True
        )
    assert torch.equal(highest.cpu(), cpu)


def test_emulated_ops_are_compiled_ops_of_the_eager_cache(emulated):
    a = torch.ones(8, 8, device="tpu")
    torch.tpu._clear_cache()
    for _ in range(3):
        a @ a
    assert (torch.tpu._get_cache_requests(), torch.tpu._get_cache_hits()) == (3, 2)
    torch.tpu._clear_cache()


@pytest.mark.parametrize("lowering", ["aten", "inductor"])
def test_graphs_compiled_while_emulating_compute_as_the_emulated_eager_ops(
    emulated, fresh_dynamo, lowering
):
    """torch.compile(backend="tpu"): the products are decomposed into the MXU passes when the
    graph is traced, forward and backward; Inductor keeps their bfloat16 roundings."""
    from tpu_lab.device import compile_backend

    g = torch.Generator().manual_seed(11)
    x, w = torch.randn(6, 16, generator=g), torch.randn(8, 16, generator=g)
    b = torch.randn(8, generator=g)
    upstream = torch.randn(6, 8, generator=g).to("tpu")
    compiled = torch.compile(functional.linear, backend="tpu", fullgraph=True)
    runs = []
    with compile_backend.lowering(lowering):
        for fn in (compiled, functional.linear):
            leaves = [t.to("tpu").requires_grad_() for t in (x, w, b)]
            out = fn(*leaves)
            out.backward(upstream)
            runs.append([out.detach().cpu()] + [t.grad.cpu() for t in leaves])
    (out, grad_x, grad_w, grad_b), (eager_out, eager_x, eager_w, eager_b) = runs
    assert torch.equal(out, eager_out)  # the products: bit for bit
    assert torch.equal(grad_x, eager_x) and torch.equal(grad_w, eager_w)
    torch.testing.assert_close(grad_b, eager_b)  # a sum: Inductor may add in another order
    assert not torch.equal(out, functional.linear(x, w, b))  # not the CPU's float32


def test_turning_the_emulation_off_gives_the_cpus_numbers_back():
    a, b = _pair(16, 64, 16, seed=9)
    ta, tb = a.to("tpu"), b.to("tpu")
    previous = emulation.emulate(True)
    try:
        assert not torch.equal((ta @ tb).cpu(), a @ b)
    finally:
        emulation.emulate(False)
    assert torch.equal((ta @ tb).cpu(), a @ b)
    with torch.no_grad():
        assert torch.equal(functional.linear(ta, tb.t()).cpu(), functional.linear(a, b.t()))
    emulation.emulate(previous)


def test_tpu_lab_numerics_tpu_turns_the_emulation_on_at_start():
    code = (
        "import torch, tpu_lab\n"
        "from tpu_lab.device import emulation\n"
        "a, b = torch.randn(8, 32), torch.randn(32, 8)\n"
        "out = (a.to('tpu') @ b.to('tpu')).cpu()\n"
        "model = a.bfloat16().float() @ b.bfloat16().float()\n"
        "print(emulation.is_enabled(), torch.equal(out, model))\n"
    )
    env = {**os.environ, "TPU_LAB_NUMERICS": "tpu", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["True", "True"]


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
    text = tpu_lab.view(report).to_text(width=120)
    assert text.splitlines()[0] == (
        "parity: the bundled (simulated) device vs CPU, 5 modules: bitwise equal"
    )
    assert "    2.0  Linear      3x4     0           0        0            0" in text
    assert "<table>" in tpu_lab.view(report).to_html()


def test_parity_shows_where_emulated_tpu_numerics_part_from_the_cpu(emulated):
    """With the TPU numerics emulation on, the Linear layer differs and the Tanh after it
    inherits the difference; the gradients differ too."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Tanh())
    report = parity(model, torch.randn(4, 64))
    linear_row = report.rows[1]
    assert not report.bitwise
    assert 1e-5 < linear_row.forward_rel < 1e-1
    assert report.emulated and report.worst_grad > 0
    title = tpu_lab.view(report).to_text().splitlines()[0]
    assert title.startswith(
        "parity: the bundled (simulated) device with TPU numerics emulated vs CPU, 3 modules: "
        "worst forward "
    )


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
