"""The recompile timeline: text at a fixed width, HTML, a figure; and on a real recompile."""

from __future__ import annotations

import torch

import tpu_lab
from tpu_lab.events import Event
from tpu_lab.views import RecompileTimelineView

COMPILE = Event(1, "compile", "compiled f in 0.50 s (3 ops)", 100.0, 3, "/home/me/train.py:12",
                {"compile_seconds": 0.5})  # fmt: skip
RECOMPILE = Event(
    2, "recompile", "recompiled f: argument x: dimension 0 changed from 3 to 4", 101.5, 4,
    "/home/me/train.py:12",
    {"changes": ["argument x: dimension 0 changed from 3 to 4"],
     "hints": ["pad or bucket this dimension"], "compile_seconds": 0.25, "storm": True},
)  # fmt: skip
MISS = Event(
    3, "cache_miss", "compile cache miss (compiles): scalar 0.5 vs cached 0.25", 102.25, None,
    "/tmp/ipykernel_1/77.py:3",
    {"changes": ["scalar 0.5 vs cached 0.25 baked into the graph"],
     "hints": ["move the Python number <x> into a tensor"]},
)  # fmt: skip
SYNC = Event(4, "sync", "host waited for the device (item)", 103.0, 4, "/home/me/train.py:20")


def test_timeline_text_at_fixed_width():
    view = RecompileTimelineView([COMPILE, RECOMPILE, MISS, SYNC])
    assert view.to_text(width=90) == (
        "recompile timeline: 1 recompile, 1 compile, 1 cache miss in 2 cells; 0.75 s compiling\n"
        "  cell     time  kind        call site    what changed\n"
        "  [3]   +0.00 s  compile     train.py:12  compiled f in 0.50 s (3 ops)\n"
        "  [4]   +1.50 s  recompile   train.py:12  argument x: dimension 0 changed from 3 to 4\n"
        "  -     +2.25 s  cache_miss  77.py:3      scalar 0.5 vs cached 0.25 baked into the graph\n"
        "recompiles per cell\n"
        "  [4]  ████████████████████████████████████████ 1  recompilation storm\n"
        "  -    ████████████████████████████████████████ 1"
    )
    assert RecompileTimelineView([SYNC]).to_text(width=90) == (
        "recompile timeline: 0 recompiles, 0 compiles, 0 cache misses; 0.00 s compiling\n"
        "  (no compilations yet)"
    )


def test_timeline_html_escapes_and_is_self_contained():
    html = RecompileTimelineView([COMPILE, RECOMPILE, MISS]).to_html()
    assert "fix: move the Python number &lt;x&gt; into a tensor" in html
    assert "<script" not in html and "<style" not in html and "class=" not in html
    assert html.count("<tr style='border-top:1px solid #e5e7eb'>") == 3
    assert "<span>1 recompilation storm</span>" in html
    assert "(no compilations yet)" in RecompileTimelineView([]).to_html()


def test_timeline_figure():
    fig = RecompileTimelineView([COMPILE, RECOMPILE, MISS]).figure()
    (ax,) = fig.axes
    assert [t.get_text() for t in ax.get_yticklabels()] == ["train.py:12", "77.py:3"]
    points = sorted(tuple(p) for c in ax.collections for p in c.get_offsets().tolist())
    assert points == [(0.0, 0.0), (1.5, 0.0), (2.25, 1.0)]
    labels = [t.get_text() for t in ax.texts]
    assert labels == ["argument x: dimension 0 changed from 3 to 4",
                      "scalar 0.5 vs cached 0.25 baked into the graph"]  # fmt: skip
    assert RecompileTimelineView([]).png().startswith(b"\x89PNG")


def test_timeline_of_a_real_recompile(fresh_dynamo, use_lowering):
    use_lowering("aten")
    tpu_lab.events.log.clear()
    f = torch.compile(lambda x: x * 2, backend="tpu")
    for n in (3, 4):
        f(torch.ones(n, device="tpu"))
    view = RecompileTimelineView.current()
    assert [e.kind for e in view.events] == ["compile", "recompile"]
    text = view.to_text(width=120)
    assert "recompile timeline: 1 recompile, 1 compile, 0 cache misses" in text
    assert "argument x: dimension 0 changed from 3 to 4" in text
    assert "test_views_timeline.py:" in text  # the call site is this file
