"""Estimates of what the "tpu" device ran (tpu_lab.estimate.recorded): the compiled core's op
log, its signatures against those recorded on meta tensors, eager, fused and compiled modes,
tpu_lab.timed's estimate line, and the errors for bad input."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import tpu_lab
from tpu_lab import estimating
from tpu_lab.device import current
from tpu_lab.errors import TpuLabError
from tpu_lab.estimate import estimate
from tpu_lab.estimate.trace import Recorder
from tpu_lab.views.estimate import line

EagerMode = torch.tpu.EagerMode


def _fn(x, w, b):
    y = torch.relu(x @ w) + b
    y.mul_(2)
    z = torch.nn.functional.linear(y, w, b)
    return torch.cat([z.sum(dim=1, keepdim=True), z[:, :1] * 0.5]).softmax(-1), z.mean(dim=0)


def _inputs(device: str) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return [torch.randn(s, generator=g).to(device) for s in [(96, 200), (200, 200), (200,)]]


def _fields(e) -> dict:
    """An estimate's fields but its title and its peak HBM (the device measures its own)."""
    return {k: v for k, v in dataclasses.asdict(e).items() if k not in ("title", "memory")}


def test_recorded_signatures_are_those_on_meta_tensors():
    meta = [torch.empty(t.shape, device="meta") for t in _inputs("cpu")]
    rec = Recorder()
    with rec:
        _fn(*meta)
    on_meta = [r.sig for r in rec.program.records if not r.sig.func.is_view]
    with estimating() as r:
        _fn(*_inputs("tpu"))
    assert [r.sig for r in r.eager.records] == on_meta


def test_kernels_of_their_own_are_recorded_as_the_op_called():
    def conv(x, w, b, y):
        y.copy_(torch.nn.functional.conv2d(x, w, b, padding=1))
        return y

    shapes = [(2, 3, 8, 8), (4, 3, 3, 3), (4,), (2, 4, 8, 8)]
    meta = [torch.empty(s, device="meta") for s in shapes]
    rec = Recorder()
    with rec:
        conv(*meta)
    tensors = [torch.randn(s, device="tpu") for s in shapes]
    with estimating() as r:
        conv(*tensors)
    assert [r.sig for r in r.eager.records] == [r.sig for r in rec.program.records]
    assert [r.sig.name for r in r.eager.records] == ["aten.convolution", "aten.copy_"]


def test_recorded_estimate_equals_the_meta_estimate():
    meta = [torch.empty(t.shape, device="meta") for t in _inputs("cpu")]
    expected = estimate(_fn, *meta, mode="eager")
    tensors = _inputs("tpu")
    with estimating() as r:
        _fn(*tensors)
    got = r.estimate()
    assert _fields(got) == _fields(expected)
    assert got.chip.name == "v6e" and got.mode == "eager" and got.title == "block"
    assert r.estimate("v5e").chip.name == "v5e"
    assert r.estimate("v5e").seconds > got.seconds  # a slower chip


def test_recording_off_leaves_no_records():
    x = torch.ones(64, device="tpu")
    with estimating() as r:
        pass
    x + x  # outside the block: not recorded
    assert r.ops == 0 and not current().core.op_logging()
    with estimating() as r:
        x + x
    assert r.ops == 1 and not current().core.op_logging()


def test_blocks_nest_and_a_raising_op_is_left_out():
    x, y = torch.ones(64, device="tpu"), torch.ones(4, 4, device="tpu")
    with estimating() as outer:
        x + x
        with estimating() as inner:
            x * x
        with pytest.raises(RuntimeError):
            torch.mm(x.reshape(8, 8), y)  # raises in the kernel: did not run
    assert [r.sig.name for r in inner.eager.records] == ["aten.mul"]
    assert [r.sig.name for r in outer.eager.records] == ["aten.add", "aten.mul"]


def test_each_thread_records_its_own_ops():
    import threading

    x = torch.ones(64, device="tpu")
    with estimating() as r:
        t = threading.Thread(target=lambda: x * x)
        t.start()
        t.join()
        x + x
    assert [r.sig.name for r in r.eager.records] == ["aten.add"]


def test_a_fused_graph_is_costed_as_one_graph():
    x, w = torch.randn(64, 128, device="tpu"), torch.randn(128, 128, device="tpu")
    with torch.tpu.set_eager_mode(EagerMode.DEFER_AND_FUSE), estimating() as r:
        torch.relu(x @ w).add(1).sum().item()  # .item(): a sync point ends the graph
        (x * 2).sum().item()
    assert r.eager.records == [] and len(r.graphs) == 2
    e = r.estimate()
    assert e.mode == "fuse"
    assert e.launch_seconds == pytest.approx(2 * tpu_lab.estimate.settings.graph_launch_seconds)
    meta = [torch.empty(t.shape, device="meta") for t in (x, w)]
    one = estimate(lambda a, b: torch.relu(a @ b).add(1).sum(), *meta, mode="fuse")
    first = tpu_lab.estimate.recorded.cost(r.graphs[0], e.chip, "fuse")
    assert first.seconds == one.seconds and first.hbm_bytes == one.hbm_bytes


def test_a_compiled_graph_is_costed_once_and_counted_per_call(fresh_dynamo, use_lowering):
    use_lowering("aten")
    f = torch.compile(lambda a, b: torch.relu(a @ b).sum(0), backend="tpu")
    x, w = torch.randn(64, 128, device="tpu"), torch.randn(128, 128, device="tpu")
    f(x, w)  # compiled outside the block
    graph = current().compiled[-1]
    with estimating() as r:
        f(x, w)
        f(x, w)
    assert r.calls == [graph, graph] and r.eager.records == []
    e = r.estimate()
    one = graph.estimate(e.chip)
    assert e.mode == "compiled" and e.seconds == pytest.approx(2 * one.seconds)
    assert graph.estimate(e.chip) is one  # worked out once
    assert one.flops == 2 * 64 * 128 * 128


def test_the_chip_is_the_simulated_topology():
    try:
        tpu_lab.use_topology("v5e-4")
        with estimating() as r:
            torch.ones(8, device="tpu") * 3
        assert r.estimate().chip.name == "v5e"
    finally:
        tpu_lab.use_topology("v6e-1")


def test_timed_prints_the_estimate_beside_host_time():
    x = torch.randn(256, 256, device="tpu")
    with tpu_lab.timed("step") as t:
        x @ x
    text = str(t)
    host, est = text.splitlines()
    assert host.startswith("step: ") and "(host time on the simulated device)" in host
    assert est.startswith("step: estimated on an idealised TPU v6e chip (not a measurement): ")
    assert "-bound; MXU " in est and "top: aten.mm 100%" in est
    assert t.estimate.flops == 2 * 256**3


def test_an_empty_block_says_no_tpu_ops_ran():
    with tpu_lab.timed("nothing") as t:
        pass
    assert str(t).splitlines()[1] == (
        "nothing: estimated on an idealised TPU v6e chip (not a measurement): no TPU ops ran"
    )


def test_on_a_real_tpu_estimating_says_what_to_use_instead(monkeypatch):
    from tpu_lab.runtime import select
    from tpu_lab.runtime.torchtpu import TorchTPUBackend

    monkeypatch.setattr(select, "_active", TorchTPUBackend())
    with pytest.raises(TpuLabError) as info:
        estimating()
    assert str(info.value) == (
        "estimating() records the ops of tpu_lab's simulated 'tpu' device, and this process runs "
        "on a real TPU: time the block there with tpu_lab.timed, or estimate a function on meta "
        "tensors with tpu_lab.estimate.estimate(fn, *meta_args)."
    )


def test_unknown_generation_is_a_clear_error():
    known = r"known: v4, v5e, v5p, v6e, v7\.$"
    with pytest.raises(TpuLabError, match=rf"^Unknown TPU generation 'v9'; {known}"):
        estimating(on="v9").__enter__()  # before the block runs
    with estimating() as r:
        pass
    with pytest.raises(TpuLabError, match="Unknown TPU generation 'h100'"):
        r.estimate("h100")


def test_backward_on_autograds_device_thread_is_recorded():
    x = torch.randn(64, 32, device="tpu", requires_grad=True)
    w = torch.randn(32, 16, device="tpu", requires_grad=True)
    meta = [torch.empty(t.shape, device="meta", requires_grad=True) for t in (x, w)]
    rec = Recorder()
    with rec:
        (meta[0] @ meta[1]).sum().backward()
    with estimating() as r:
        (x @ w).sum().backward()  # the backward's ops run on autograd's "tpu" thread
    names = [r.sig.name for r in r.eager.records]
    assert names.count("aten.mm") == 3  # the forward's and the two of the backward
    on_meta = [r.sig for r in rec.program.records if r.sig.name == "aten.mm"]
    assert [r.sig for r in r.eager.records if r.sig.name == "aten.mm"] == on_meta


def test_the_estimate_follows_the_assumptions_in_force():
    x = torch.randn(64, device="tpu")
    with estimating() as r:
        x + x
    before = r.estimate()
    with tpu_lab.estimate.assume(eager_launch_seconds=1e-3):
        assert r.estimate().launch_seconds == 1e-3
    assert r.estimate() == before


def test_beyond_the_ops_kept_in_order_ops_are_counted_and_costed_alike():
    x = torch.ones(8, device="tpu")
    with estimating() as r:
        for _ in range(100_010):
            torch.add(x, x)
        with estimating() as inner:  # counted from where it began
            x * x
            x * x
    assert len(r.eager.records) == 100_000 and r.ops == 100_012 and inner.ops == 2
    assert [(s.sig.name, n) for s, n in r.counted] == [("aten.add", 10), ("aten.mul", 2)]
    one = tpu_lab.estimate.op_cost(r.eager.records[0].sig, r.chip)
    e = r.estimate()
    assert e.seconds == pytest.approx(100_010 * one.seconds + 2 * inner.estimate().seconds / 2)
    assert [(o.name, o.count) for o in e.ops] == [("aten.add", 100_010), ("aten.mul", 2)]
    assert r.timeline()[-1][:1] == ("12 more ops, counted",)


def test_a_graph_with_dynamic_shapes_is_costed_at_its_traced_sizes_and_says_so(
        fresh_dynamo, use_lowering):
    use_lowering("aten")
    f = torch.compile(lambda a: torch.relu(a @ a.T).sum(0))  # Dynamo marks sizes dynamic
    f(torch.randn(8, 32, device="tpu"))
    f(torch.randn(12, 32, device="tpu"))  # recompiled with a dynamic first dimension
    with estimating() as r:
        f(torch.randn(16, 32, device="tpu"))
    e = r.estimate()
    (graph,) = r.calls
    assert e.flops == 2 * 12 * 32 * 12  # the traced sizes, not the call's
    assert e.notes == (f"{graph.title} has dynamic shapes: costed at the sizes it was traced "
                       "with",)
    assert line(e).endswith(f"; note: {e.notes[0]}")


def test_the_line_names_an_op_of_several_shapes_once():
    a, b = torch.ones(64, device="tpu"), torch.ones(8, device="tpu")
    with estimating() as r:
        a * a
        b * b
        a + a
    e = r.estimate()
    assert [o.name for o in e.ops].count("aten.mul") == 2
    assert line(e).split("top: ")[1].startswith("aten.mul 67%, aten.add 33%")
