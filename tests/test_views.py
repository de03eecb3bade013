"""Text and HTML renderings of the event log and of a recompile explanation; timing."""

from __future__ import annotations

import pytest
import torch

import tpu_lab
from tpu_lab.events import Event
from tpu_lab.views import EventLogView, ExplanationView

RECOMPILE = Event(
    seq=3,
    kind="recompile",
    summary="recompiled f: argument x: dimension 1 changed from 77 to 78",
    time=0.0,
    cell=12,
    where="/tmp/ipykernel_1/123.py:4",
    details={
        "function": "f (/tmp/ipykernel_1/99.py:1)",
        "reason": "0/0: tensor 'x' size mismatch at index 1. expected 77, actual 78",
        "changes": ["argument x: dimension 1 changed from 77 to 78"],
        "hints": ["pad or bucket this dimension"],
        "compile_seconds": 1.5,
        "site_compile_seconds": 4.25,
        "recompiles_here": 4,
        "storm": True,
    },
)
SYNC = Event(seq=4, kind="sync", summary="host waited for the device (item)", time=0.0,
             cell=12, where="/home/me/train.py:88", details={"reason": "item"})  # fmt: skip


def test_event_log_text_at_fixed_width():
    text = EventLogView([RECOMPILE, SYNC]).to_text(width=100)
    assert text == (
        "tpu_lab events (2)\n"
        "    3   [12] recompile   recompiled f: argument x: dimension 1 changed from 77 to 78        123.py:4\n"
        "                  fix: pad or bucket this dimension\n"
        "    4   [12] sync        host waited for the device (item)                               train.py:88"
    )


def test_event_log_html_escapes_and_has_every_event():
    evil = Event(5, "sync", "<script>alert(1)</script>", 0.0)
    html = EventLogView([RECOMPILE, evil]).to_html()
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert "recompiled f: argument x: dimension 1 changed from 77 to 78" in html
    assert "fix: pad or bucket this dimension" in html
    bundle = EventLogView([])._repr_mimebundle_()
    assert set(bundle) == {"text/plain", "text/html"} and "(none yet)" in bundle["text/plain"]


def test_explanation_text():
    assert ExplanationView(RECOMPILE).to_text(width=100) == (
        "recompile #3: recompiled f: argument x: dimension 1 changed from 77 to 78\n"
        "  function           f (/tmp/ipykernel_1/99.py:1)\n"
        "  called at          /tmp/ipykernel_1/123.py:4\n"
        "  guard that failed  0/0: tensor 'x' size mismatch at index 1. expected 77, actual 78\n"
        "  what changed       argument x: dimension 1 changed from 77 to 78\n"
        "  how to fix         pad or bucket this dimension\n"
        "  cost               1.50 s this time, 4.25 s in total at this call site, 4 recompile(s) here\n"
        "  warning            recompilation storm: this call site keeps recompiling"
    )
    assert "recompilation storm" in ExplanationView(RECOMPILE).to_html()


def test_explain_errors_are_clear():
    with pytest.raises(
        tpu_lab.TpuLabError, match="Event 4 is a 'sync' event; only recompiles, cache misses and graph breaks"
    ):
        ExplanationView(SYNC)
    with pytest.raises(tpu_lab.TpuLabError, match=r"No event #999999 in the log"):
        tpu_lab.explain(999999)


def test_explain_and_event_log_on_a_real_recompile():
    torch._dynamo.reset()
    tpu_lab.events.log.clear()
    f = torch.compile(lambda x: x.sum(), backend="tpu")
    f(torch.ones(2, 3, device="tpu"))
    f(torch.ones(2, 4, device="tpu"))
    view = tpu_lab.explain()
    assert view.event.details["changes"] == ["argument x: dimension 1 changed from 3 to 4"]
    assert "recompile" in tpu_lab.event_log("recompile").to_text()


def test_timed_splits_compile_from_run_time():
    torch._dynamo.reset()
    f = torch.compile(lambda x: x * 2, backend="tpu")
    with tpu_lab.timed("first call") as t:
        f(torch.ones(8, device="tpu")).sum().item()
    assert t.compilations == 1 and t.sync_points == 1
    assert 0 < t.compile_seconds <= t.seconds and t.run_seconds >= 0
    assert str(t).startswith("first call: ") and "host time on the simulated device" in str(t)

    @tpu_lab.timed()
    def step():
        return f(torch.ones(8, device="tpu"))

    step()
    assert step.last.label == "step" and step.last.compilations == 0


def test_table_cells_read_left_aligned_in_notebooks():
    from tpu_lab.views.base import align_left

    assert align_left(
        "<table><thead><tr><th>a</th></tr></thead><tr><td colspan='2' style='padding:1px'>b</td>"
        '<td style="text-align:right">c</td><td>d</td></tr></table>'
    ) == (
        "<table><thead><tr><th style='text-align:left'>a</th></tr></thead><tr><td colspan='2' "
        "style='text-align:left;padding:1px'>b</td><td style=\"text-align:left;text-align:right\">"
        "c</td><td style='text-align:left'>d</td></tr></table>"
    )
    bundle = tpu_lab.event_log()._repr_mimebundle_()
    assert "<td style='text-align:left;" in bundle["text/html"]


def test_the_lookup_draws_data_objects_and_refuses_the_rest():
    from tpu_lab.errors import TpuLabError
    from tpu_lab.views import StatusView, view

    drawn = view(tpu_lab.status())
    assert isinstance(drawn, StatusView) and view(drawn) is drawn
    assert drawn.to_text(100).startswith("tpu_lab status\n  backend       tpu_lab bundled")
    assert "compile cache" not in drawn.to_text(100)  # the device alone, not this process's record
    with pytest.raises(TpuLabError, match="tpu_lab has no picture of a object; it draws "):
        view(object())


def test_a_data_object_left_as_a_cells_value_is_drawn_in_ipython():
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output

    shell = InteractiveShell.instance()
    tpu_lab.load_ipython_extension(shell)  # registers the formatters of views.lookup
    data = tpu_lab.status()
    bundle, _ = shell.display_formatter.format(data)
    assert bundle["text/plain"] == tpu_lab.view(data).to_text()
    assert bundle["text/html"].startswith("<div class='tex2jax_ignore mathjax_ignore'><div style=")
    with capture_output() as cap:
        shell.run_cell("import tpu_lab\ntpu_lab.status()", store_history=True)
    assert "tpu_lab status" in cap.stdout and "DeviceStatus(" not in cap.stdout


def test_print_of_a_data_object_is_its_picture_and_repr_stays_the_dataclass():
    """print(plan), print(sh.simulate(...)), print(estimate), print(tpu_lab.status()) show
    their views as text; repr() is the dataclass's (the data classes cannot import the views:
    the package root installs the renderer, tpu_lab._drawn)."""
    from transformers import LlamaConfig

    import tpu_lab.sharding as sh
    from tpu_lab.estimate import estimate
    from tpu_lab.models import TINY_LLAMA

    plan = sh.plan(LlamaConfig(**dict(TINY_LLAMA, num_key_value_heads=4)), chips=4)
    run = sh.simulate(torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),
                                          torch.nn.Linear(16, 8)),
                      torch.randn(2, 8), chips=2, tp_plan={"0": "colwise", "2": "rowwise"})
    cost = estimate(lambda x: x @ x, torch.empty(256, 256, device="meta"), on="v6e")
    for data in (plan, run, cost, tpu_lab.status(), plan.layout):
        assert str(data) == tpu_lab.view(data).to_text()
        assert repr(data).startswith(f"{type(data).__name__}(")
    assert str(plan).startswith("Plan: LlamaForCausalLM (config), tensor parallel over 4 chips")
    assert str(run).startswith("Simulated mesh: Sequential, tensor parallel over 2 chips")
    one = sh.plan(LlamaConfig(**TINY_LLAMA), chips=1)
    assert str(one).startswith(
        "Plan: LlamaForCausalLM (config), on 1 chip (no tensor parallelism) of TPU v6e")
