"""The slice widget's Python side: what it shows is what chooser.weigh() weighs, each change of a
control weighs again, a refused change keeps the last good state and says why, a generation or
slice change keeps the rest whole, the static text and HTML, and the front end's contract."""

from __future__ import annotations

import re
import typing

import pytest
from transformers import LlamaConfig

from tpu_lab.errors import ShardingError, TopologyError, TpuLabError
from tpu_lab.models.shapes import TRANSFORMER_CONFIG
from tpu_lab.sharding.chooser import weigh
from tpu_lab.units import format_bytes
from tpu_lab.views import _widget_protocol as protocol
from tpu_lab.views._slice_rows import SliceView, hosts, tp_degrees
from tpu_lab.views.base import esc
from tpu_lab.views.estimate import seconds_text, terms_text, usd_text

pytest.importorskip("anywidget", reason="the slice widget needs the [lab] extra")
from tpu_lab.views._widget_files import widget_file  # noqa: E402
from tpu_lab.views.slice_widget import INPUTS, SliceWidget  # noqa: E402

LLAMA = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                    num_attention_heads=8, num_key_value_heads=8, vocab_size=256,
                    max_position_embeddings=8192)
FLUX = {"_class_name": "FluxTransformer2DModel", **TRANSFORMER_CONFIG}


@pytest.fixture(scope="module")
def llama():
    """A tiny Llama's training step on a v6e-4, batch 8 x seq 64."""
    return SliceWidget(LLAMA, "train", batch=8, seq=64, generation="v6e", devices=4)


@pytest.fixture
def widget(llama):
    """The module's widget, put back as it was after each test."""
    before = llama.inputs()
    yield llama
    with llama.hold_trait_notifications():
        for name, value in before.items():
            setattr(llama, name, value)
    assert llama.inputs() == before and llama.error == ""


def figures(w) -> dict[str, dict]:
    return {f["key"]: f for f in w.result["figures"]}


def same(w, task: str = "train", **step) -> None:
    """The widget shows what weigh() weighs for its controls' values."""
    i = w.inputs()
    size = None if i["seq"] is not None else tuple(map(int, i["image_size"].split("x")))
    o = weigh(step.pop("config", LLAMA), task, generation=i["generation"], devices=i["devices"],
              tp=i["tp"], batch=i["batch"], seq=i["seq"], image_size=size, remat=i["remat"],
              commitment=i["commitment"], **step)
    e = o.estimate
    assert (w.option.slice_name, w.option.parallelism, w.option.remat) == (
        o.slice_name, o.parallelism, o.remat)
    assert w.option.estimate.expected_seconds == pytest.approx(e.expected_seconds, rel=1e-9)
    shown = figures(w)
    assert shown["expected"]["value"] == seconds_text(e.expected_seconds)
    assert shown["expected"]["note"] == f"idealised bound {seconds_text(e.seconds)}"
    assert shown["bound"]["value"] == f"{e.bound}-bound"
    assert shown["bound"]["note"] == terms_text(e)
    usd = e.usd_per_step(i["commitment"])
    assert shown["step_price"]["value"] == ("no price" if usd is None else usd_text(usd))
    assert w.hbm["usage"].startswith(
        f"{format_bytes(int(e.memory.peak_bytes))} of {format_bytes(e.hbm_capacity)} (")
    assert w.hbm["over"] is (not e.fits)
    assert {c["name"]: c["value"] for c in w.controls if c["name"] in i} == {
        k: str(v) for k, v in i.items() if k in {c["name"] for c in w.controls}}


def test_the_widget_shows_what_weigh_weighs(widget):
    same(widget)
    assert widget.error == "" and widget.busy == ""
    assert widget.header["title"] == "Which slice: LlamaForCausalLM train, batch 8 x seq 64"
    assert "not measurements" in widget.header["subtitle"]
    assert widget.result["title"] == "v6e-4 (4 chips) · tp 1 x fsdp 4 · remat none"
    names = [c["name"] for c in widget.controls]
    assert names == ["generation", "devices", "tp", "batch", "seq", "remat", "commitment"]
    slices = next(c for c in widget.controls if c["name"] == "devices")
    assert [o["value"] for o in slices["options"]][:4] == ["1", "4", "8", "16"]
    assert slices["options"][3]["label"] == "v6e-16 · 16 chips · 4 hosts"
    batch = next(c for c in widget.controls if c["name"] == "batch")
    assert (batch["kind"], batch["step"], batch["numeric"]) == ("number", 4, True)


@pytest.mark.parametrize("change", [
    {"remat": "full"},
    {"devices": 8},
    {"tp": 4},
    {"batch": 32},
    {"seq": 256},
    {"commitment": "spot"},
    {"generation": "v5p"},
    {"generation": "v7"},
])  # fmt: skip
def test_each_change_weighs_the_step_again(widget, change):
    before = widget.updates
    for name, value in change.items():
        setattr(widget, name, value)
    assert widget.error == ""
    assert {k: widget.inputs()[k] for k in change} == change
    assert widget.updates == before + 1  # one redraw
    same(widget)


def test_a_new_generation_keeps_the_slice_it_has_and_takes_the_nearest_it_lacks(widget):
    widget.generation = "v5p"
    widget.devices = 2
    widget.generation = "v6e"  # no v6e-2: the nearest, the smaller on a tie
    assert (widget.devices, widget.tp, widget.error) == (1, 1, "")
    widget.devices = 8
    widget.tp = 8
    widget.batch = 8
    widget.devices = 16  # 4 hosts of 4: tp 8 does not fit in a host, the largest that does
    assert (widget.devices, widget.tp, widget.error) == (16, 4, "")
    assert tp_degrees("v6e", 16) == [1, 2, 4] and hosts("v6e", 16) == 4
    same(widget)


@pytest.mark.parametrize(("name", "value", "why"), [
    ("batch", 7, "batch must be a positive multiple of the 4 FSDP chips beside tensor "
                 "parallelism of 1; got 7, try 4."),
    ("batch", 0, "batch must be a positive whole number; got 0."),
    ("batch", "", "batch must be a positive whole number; got ''."),
    ("batch", 8.5, "batch must be a positive whole number; got 8.5."),
    ("seq", "abc", "seq must be a positive whole number; got 'abc'."),
    ("tp", 3, "tensor parallelism of 3 does not split v6e-4 (4 devices a host); try tp 1, 2, "
              "4."),
    ("devices", 3, "TPU v6e has no slice of 3 devices; its slices: 1, 4, 8, 16, 32, 64, 128, "
                   "256."),
    ("generation", "v9",
     "Unknown TPU generation 'v9'. Known generations: v4, v5e, v5p, v6e, v7. Example: 'v6e'."),
    ("remat", "some", "remat must be one of none, full, dots; got 'some'."),
    ("commitment", "forever", None),
])  # fmt: skip
def test_a_refused_change_keeps_the_last_good_state_and_says_why(widget, name, value, why):
    good, option, result, hbm = widget.inputs(), widget.option, widget.result, widget.hbm
    before = widget.updates
    setattr(widget, name, value)
    assert widget.error == why if why else "forever" in widget.error
    assert widget.inputs() == good  # the control is set back
    assert (widget.option, widget.result, widget.hbm) == (option, result, hbm)
    assert widget.updates == before + 1  # the front end redraws the controls as they were
    assert why is None or why in widget.view().to_text(200)
    widget.remat = "dots"  # the next good change clears the error
    assert widget.error == ""
    same(widget)


def test_a_step_that_does_not_fit_is_over_with_the_fix(widget):
    widget.generation = "v5e"
    widget.devices = 1
    widget.batch = 1024
    widget.seq = 8192
    assert widget.error == ""
    same(widget)
    hbm = widget.hbm
    assert hbm["over"] and 0 < hbm["capacity"] < 100  # the chip's HBM ends inside the bar
    assert hbm["verdict"].startswith("does NOT fit in HBM: peak ")
    assert hbm["fix"].startswith("To fit, try more recomputation (remat 'dots' or 'full'); or "
                                 "more chips (v5e-4 or larger: FSDP shares the weights, ")
    assert "a smaller batch (512)" in hbm["fix"]
    assert "a generation with more HBM per chip (v4, v5p, v6e, v7)" in hbm["fix"]
    assert sum(s["width"] for s in hbm["segments"]) == pytest.approx(100, abs=0.1)
    text = widget.view().to_text(120)
    assert re.search(r"│[^│]*¦[^│]*│ .* OVER\n", text)  # the capacity marked inside the bar
    widget.remat = "full"
    same(widget)


def test_an_unpriced_generation_says_so(widget):
    widget.generation = "v7"
    shown = figures(widget)
    assert shown["step_price"]["value"] == "no price"
    assert shown["step_price"]["note"] == "no published on-demand price of a TPU v7 chip-hour"
    assert not widget.result["priced"]
    assert widget.result["title"].startswith("v7-4 (2 chips)")
    assert widget.hbm["title"] == "HBM of each of the 4 devices (2 a chip)"


def test_an_image_model_has_an_image_size_and_no_remat():
    w = SliceWidget(FLUX, "forward", batch=1, image_size=(64, 64), generation="v6e", devices=1)
    names = [c["name"] for c in w.controls]
    assert "seq" not in names and "image_size" in names
    assert next(c for c in w.controls if c["name"] == "remat")["disabled"]
    same(w, "forward", config=FLUX)
    assert figures(w)["unit_price"]["label"] == "list price per image"
    w.image_size = "128x128"
    assert w.error == ""
    same(w, "forward", config=FLUX)
    w.image_size = "big"
    assert w.error == "image_size must be HEIGHTxWIDTH in pixels, e.g. 1024x1024; got 'big'."
    assert w.image_size == "128x128"
    w.remat = "full"
    assert w.error == ("remat 'full' checkpoints a training step's activations; a forward step "
                       "keeps none: use 'none'.")
    assert w.remat == "none"


def test_the_default_split_is_the_least_tensor_parallelism_that_splits_the_batch():
    w = SliceWidget(FLUX, "forward", batch=1, image_size=(64, 64), generation="v6e", devices=4)
    assert (w.tp, w.result["title"]) == (4, "v6e-4 (4 chips) · tp 4")
    w = SliceWidget(LLAMA, "train", batch=16, seq=64)
    assert (w.generation, w.devices, w.tp) == ("v6e", 8, 1)  # the largest one-host slice


def test_what_cannot_be_weighed_is_refused_up_front():
    with pytest.raises(TpuLabError) as info:
        SliceWidget(LLAMA, "train", batch=8)
    assert str(info.value) == (
        "The slice widget weighs one step: give seq= (a language model's tokens per sequence) "
        "or image_size=(height, width) (an image model's pixels), not both.")
    with pytest.raises(TopologyError, match="Unknown TPU generation 'v9'"):
        SliceWidget(LLAMA, "train", batch=8, seq=64, generation="v9")
    with pytest.raises(ShardingError, match="batch must be a positive multiple of the 4 FSDP"):
        SliceWidget(LLAMA, "train", batch=6, seq=64, devices=4, tp=1)
    with pytest.raises(ShardingError, match="task must be one of"):
        SliceWidget(LLAMA, "fly", batch=8, seq=64)


def test_the_static_bundle_has_the_widget_and_the_same_content_as_text_and_html(widget):
    data, _ = widget._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in data
    view = widget.view()
    assert data["text/plain"] == view.to_text()
    html = data["text/html"]
    for f in widget.result["figures"]:
        assert esc(f["value"]) in html
    assert esc(widget.hbm["usage"]) in html and "a snapshot: the live widget needs a running kernel" \
        in html
    text = SliceView(view.rows).to_text(100)
    lines = text.splitlines()
    assert lines[0] == "Which slice: LlamaForCausalLM train, batch 8 x seq 64"
    assert lines[2] == "  batch 8 · sequence 64 · price on-demand"
    assert lines[3] == "  v6e-4 (4 chips) · tp 1 x fsdp 4 · remat none"
    e = widget.option.estimate
    assert f"    expected per step              {seconds_text(e.expected_seconds)} (idealised " \
           f"bound {seconds_text(e.seconds)})" in lines
    assert "  " + e.verdict in lines
    assert all(len(line) <= 100 for line in lines)


def test_the_front_end_is_loaded_from_the_widgets_folder_and_typed_like_the_protocol():
    js, css = widget_file("slice.js"), widget_file("slice.css")
    assert str(SliceWidget._esm) == js.read_text() and "export default { render }" in js.read_text()
    assert str(SliceWidget._css) == css.read_text()
    source = js.read_text()
    for name in ("SliceHeader", "ControlOption", "Control", "HbmSegment", "Hbm", "Figure",
                 "SliceResult"):
        keys = typing.get_type_hints(getattr(protocol, name))
        (typedef,) = re.findall(r"@typedef \{\{([^{}]*)\}\} " + name + r"\b", source)
        assert sorted(re.findall(r"(\w+):", typedef)) == sorted(keys), name
    for trait in (*INPUTS, "header", "controls", "hbm", "result", "busy", "error", "updates"):
        assert SliceWidget.class_traits()[trait].metadata.get("sync"), trait
