"""The bundled device: the tensor behaviour users see, compared with real CPU runs."""

from __future__ import annotations

import io

import pytest
import torch

import tpu_lab  # noqa: F401  (installs the device)


def test_factories_transfers_and_printing():
    x = torch.ones(3, device="tpu")
    assert x.device == torch.device("tpu", 0)
    assert x.is_tpu and not torch.ones(1).is_tpu
    assert repr(x) == "tensor([1., 1., 1.], device='tpu:0')"
    y = torch.arange(6.0).to("tpu")
    assert y.cpu().tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    assert y.sum().item() == 15.0
    assert torch.tensor([1, 2], device="tpu").tolist() == [1, 2]


def test_factories_keep_their_arguments_once_they_run_through_the_python_binding():
    """After its first calls a factory runs through its Python binding on the CPU (probed with
    the "tpu" device in the CPU's place): dtypes, values and the device stay right."""
    cases = [
        (torch.full, ((2, 3), 2.5), {"dtype": torch.float16}),
        (torch.arange, (1, 10, 3), {}),
        (torch.zeros, ((4,),), {"dtype": torch.int32}),
        (torch.ones, (2, 2), {}),
        (torch.empty, ((3,),), {"dtype": torch.bfloat16}),
    ]
    for factory, args, kwargs in cases:
        for _ in range(4):
            got = factory(*args, device="tpu", **kwargs)
            want = factory(*args, **kwargs)
            assert got.device == torch.device("tpu", 0) and got.dtype == want.dtype
            assert got.shape == want.shape
            if factory is not torch.empty:
                assert torch.equal(got.cpu(), want)
    assert torch.full((2,), 1.0, device="cpu").device.type == "cpu"


def test_views_share_storage_and_in_place_ops_are_seen_through_views():
    base_cpu = torch.arange(12.0).reshape(3, 4)
    base = base_cpu.to("tpu")
    col = base[:, 1]
    tr = base.t()
    col.mul_(10)
    base_cpu[:, 1].mul_(10)
    assert torch.equal(base.cpu(), base_cpu)
    assert torch.equal(tr.cpu(), base_cpu.t())
    assert tr.stride() == base_cpu.t().stride()
    assert col.untyped_storage().data_ptr() == base.untyped_storage().data_ptr()
    flat = base.view(-1)
    flat[0] = -1.0
    assert base[0, 0].item() == -1.0


def test_mixing_devices_is_a_clear_error():
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.ones(3, device="tpu") + torch.ones(3)
    # 0-dim CPU tensors are scalars, as on CUDA
    assert (torch.ones(3, device="tpu") + torch.tensor(2.0)).tolist() == [3.0, 3.0, 3.0]


def test_autograd_and_optimizer_match_cpu():
    torch.manual_seed(0)
    cpu_model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    tpu_model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    tpu_model.load_state_dict(cpu_model.state_dict())
    tpu_model.tpu()
    assert all(p.is_tpu for p in tpu_model.parameters())
    opt_c = torch.optim.AdamW(cpu_model.parameters(), lr=1e-2)
    opt_t = torch.optim.AdamW(tpu_model.parameters(), lr=1e-2)
    data = torch.randn(5, 32, 8)
    for batch in data:
        for model, opt, dev in ((cpu_model, opt_c, "cpu"), (tpu_model, opt_t, "tpu")):
            opt.zero_grad()
            loss = model(batch.to(dev)).square().mean()
            loss.backward()
            opt.step()
    for pc, pt in zip(cpu_model.parameters(), tpu_model.parameters(), strict=True):
        assert torch.equal(pc, pt.cpu())


def test_seeded_randomness_equals_cpu():
    torch.manual_seed(1234)
    cpu = [torch.randn(4, 5), torch.rand(3), torch.randint(0, 10, (6,)), torch.randperm(7)]
    torch.manual_seed(1234)
    tpu = [
        torch.randn(4, 5, device="tpu"),
        torch.rand(3, device="tpu"),
        torch.randint(0, 10, (6,), device="tpu"),
        torch.randperm(7, device="tpu"),
    ]
    for c, t in zip(cpu, tpu, strict=True):
        assert torch.equal(c, t.cpu())
    torch.tpu.manual_seed(7)
    a = torch.empty(8, device="tpu").normal_()
    torch.tpu.manual_seed(7)
    b = torch.empty(8, device="tpu").normal_()
    assert torch.equal(a.cpu(), b.cpu())
    state = torch.tpu.default_generators[0].get_state()
    c = torch.rand(3, device="tpu")
    torch.tpu.set_rng_state(state)
    assert torch.equal(c.cpu(), torch.rand(3, device="tpu").cpu())


def test_bfloat16_and_autocast_match_cpu():
    torch.manual_seed(0)
    x, w = torch.randn(16, 32), torch.randn(24, 32)
    assert torch.equal(
        (x.bfloat16() @ w.bfloat16().t()), (x.bfloat16().tpu() @ w.bfloat16().tpu().t()).cpu()
    )
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ref = torch.nn.functional.linear(x, w).softmax(-1)
    with torch.autocast("tpu", dtype=torch.bfloat16):
        out = torch.nn.functional.linear(x.tpu(), w.tpu()).softmax(-1)
    assert out.dtype == ref.dtype == torch.bfloat16
    assert torch.equal(out.cpu(), ref)


def test_torch_save_and_load_round_trip():
    state = {"w": torch.randn(3, 4).tpu(), "b": torch.arange(4).tpu()}
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    on_tpu = torch.load(buf, map_location="tpu")
    buf.seek(0)
    on_cpu = torch.load(buf, map_location="cpu")
    for k in state:
        assert on_tpu[k].is_tpu and not on_cpu[k].is_tpu
        assert torch.equal(on_tpu[k].cpu(), state[k].cpu())
        assert torch.equal(on_cpu[k], state[k].cpu())
    buf.seek(0)
    kept = torch.load(buf)  # saved from "tpu", restored on "tpu"
    assert kept["w"].is_tpu


def test_storage_reports_the_payload():
    x = torch.zeros(10, dtype=torch.float32, device="tpu")
    assert x.untyped_storage().nbytes() == 40
    assert x.data_ptr() != 0
    assert x[2:].data_ptr() == x.data_ptr() + 8
    s = torch.UntypedStorage(16, device="tpu")
    assert s.device.type == "tpu" and s.nbytes() == 16


def test_resize_and_out_arguments():
    x = torch.zeros(2, device="tpu")
    x.resize_(5)
    assert x.shape == (5,) and x.untyped_storage().nbytes() == 20
    out = torch.empty(0, device="tpu")
    torch.add(torch.ones(3, device="tpu"), 1, out=out)
    assert out.tolist() == [2.0, 2.0, 2.0]


def test_sdpa_matches_cpu():
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 7, 16) for _ in range(3))
    mask = torch.rand(7, 7) > 0.3
    for kwargs in ({"is_causal": True}, {"attn_mask": mask}, {}):
        ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, **kwargs)
        tkw = {k2: (v2.tpu() if isinstance(v2, torch.Tensor) else v2) for k2, v2 in kwargs.items()}
        out = torch.nn.functional.scaled_dot_product_attention(q.tpu(), k.tpu(), v.tpu(), **tkw)
        assert torch.equal(out.cpu(), ref), kwargs


def test_module_tpu_and_to():
    m = torch.nn.Conv2d(3, 4, 3).tpu()
    assert m.weight.is_tpu
    m.to("cpu")
    assert not m.weight.is_tpu


def test_tpu_generator_draws_the_cpus_numbers():
    g = torch.Generator("tpu").manual_seed(5)
    assert g.device == torch.device("tpu", 0)
    assert isinstance(g, torch.Generator) and isinstance(torch.default_generator, torch.Generator)
    ref = torch.randn(4, generator=torch.Generator().manual_seed(5))
    assert torch.equal(torch.randn(4, generator=g, device="tpu").cpu(), ref)
    with pytest.raises(ValueError, match="Cannot set TPU device to index 1"):
        torch.Generator("tpu:1")


def test_composite_ops_keep_aliasing_and_gradients():
    x = torch.arange(6.0).reshape(2, 3).tpu()
    with torch.no_grad():
        view = torch.einsum("ij->ji", x)  # einsum may return a view of its input
        view[0, 0] = 42.0
    assert x[0, 0].item() == 42.0  # still a view: the op was decomposed, not copied
    w = torch.randn(4, 3, requires_grad=True)
    wt = w.detach().tpu().requires_grad_()
    torch.nn.functional.linear(x.cpu(), w).sum().backward()
    torch.nn.functional.linear(x, wt).sum().backward()
    assert torch.equal(wt.grad.cpu(), w.grad)


def test_dropout_matches_cpu_in_every_dtype():
    for dtype in (torch.float32, torch.bfloat16):
        x = torch.randn(64, 64, dtype=dtype, requires_grad=True)
        xt = x.detach().tpu().requires_grad_()
        torch.manual_seed(0)
        a = torch.nn.functional.dropout(x, 0.3)
        torch.manual_seed(0)
        b = torch.nn.functional.dropout(xt, 0.3)
        assert torch.equal(a, b.cpu())
        a.sum().backward()
        b.sum().backward()
        assert torch.equal(x.grad, xt.grad.cpu())


def test_non_blocking_copies_complete_at_once():
    x = torch.arange(4.0).tpu()
    assert x.to("cpu", non_blocking=True).tolist() == [0.0, 1.0, 2.0, 3.0]
    assert torch.ones(2).to("tpu", non_blocking=True).is_tpu


def test_ops_that_write_an_argument_return_their_result():
    x = torch.tensor([-1.0, 2.0, -3.0])
    torch.manual_seed(0)
    cpu = torch.nn.functional.rrelu(x, training=True)
    torch.manual_seed(0)
    assert torch.equal(torch.nn.functional.rrelu(x.tpu(), training=True).cpu(), cpu)
    z = torch.tensor([1 + 2j]).tpu()
    assert (z.conj() + 0).cpu().tolist() == [1 - 2j]


def test_moving_a_model_without_grad_both_ways():
    """``model.to`` under no_grad, and frozen models back to the CPU. torch asks whether the
    tensor types are shallow-copy compatible: cpu and "tpu" are, as cpu and cuda are, so
    ``Module._apply`` keeps the Parameter objects (tests/test_parameters.py)."""
    with torch.no_grad():
        model = torch.nn.Linear(3, 3).to("tpu")
    assert model.weight.device.type == "tpu"
    back = model.requires_grad_(False).to("cpu")
    assert back.weight.device.type == "cpu"
    # as on CUDA: CPU and "tpu" tensors are both dense, so `param.data = tpu_tensor` is allowed
    assert torch._has_compatible_shallow_copy_type(torch.ones(1, device="tpu"), torch.ones(1))
    assert torch._has_compatible_shallow_copy_type(
        torch.ones(1, device="tpu"), torch.ones(1, device="tpu")
    )


@pytest.mark.parametrize(
    "make",
    [
        lambda: torch.ones(3, device="tpu:1"),
        lambda: torch.empty(2, device=torch.device("tpu", 2)),
        lambda: torch.ones(3).to("tpu:1"),
    ],
)
def test_only_tpu_0_exists_in_a_process(make):
    with pytest.raises(RuntimeError) as info:
        make()
    assert str(info.value).startswith("tpu:") and "does not exist: this process drives one " \
        "chip, tpu:0" in str(info.value)
    assert "%tpu cluster start" in str(info.value)
    assert torch.ones(1, device="tpu:0").device == torch.device("tpu", 0)


def test_out_dtype_matmuls_accumulate_in_float32():
    """TorchTPU's ``out_dtype`` matmuls (``aten::bmm.dtype``, ``aten::mm.dtype``): bfloat16
    inputs, float32 accumulation and result (the CPU has no kernel for them)."""
    a, b = torch.randn(2, 3, 8, dtype=torch.bfloat16), torch.randn(2, 8, 5, dtype=torch.bfloat16)
    out = torch.bmm(a.tpu(), b.tpu(), out_dtype=torch.float32)
    assert out.dtype == torch.float32
    assert torch.equal(out.cpu(), torch.bmm(a.float(), b.float()))
    assert torch.equal(torch.mm(a[0].tpu(), b[0].tpu(), out_dtype=torch.float32).cpu(),
                       a[0].float() @ b[0].float())  # fmt: skip
    with pytest.raises(RuntimeError, match="out_dtype must be the input's dtype"):
        torch.bmm(a.float().tpu(), b.float().tpu(), out_dtype=torch.bfloat16)


def test_a_compiled_training_step_matches_eager(fresh_dynamo):
    """(The pure-Python core cannot: Dynamo resumes tracing inside its Python kernels after the
    graph breaks of an optimizer step.)"""
    def losses(step_fn):
        torch.manual_seed(0)
        model = torch.nn.Linear(8, 4).tpu()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        x = torch.randn(3, 8).tpu()

        def step():
            loss = model(x).square().mean()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            return loss

        run = step_fn(step)
        return [run().item() for _ in range(3)]

    eager = losses(lambda f: f)
    compiled = losses(lambda f: torch.compile(f, backend="tpu"))
    assert compiled == pytest.approx(eager, rel=1e-6)
    assert compiled[2] < compiled[0]


def test_compiled_attention_traces_like_the_cpu(fresh_dynamo):
    """While tracing (fake tensors), SDPA asks the CPU's kernel choice about twins of the
    inputs: the fake-tensor mode must not see them."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 5, 8) for _ in range(3))

    def attend(q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)

    compiled = torch.compile(attend, backend="tpu", fullgraph=True)
    out = compiled(q.tpu(), k.tpu(), v.tpu())
    torch.testing.assert_close(out.cpu(), attend(q, k, v), rtol=1e-5, atol=1e-6)
