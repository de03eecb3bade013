"""Sharding views (tpu_lab.views.sharding): text at a fixed width compared with the expected
picture; HTML escaped and self-contained; view() dispatch; matplotlib figures."""

from __future__ import annotations

import io

import pytest
import torch
from transformers import LlamaConfig

import tpu_lab
from tpu_lab.errors import ShardingError
from tpu_lab.models import TINY_LLAMA
from tpu_lab.sharding import plan, simulate
from tpu_lab.sharding.info import REPLICATE, Split, layout_info, model_layout, shard
from tpu_lab.units import format_bytes
from tpu_lab.views import figure
from tpu_lab.views.estimate import seconds_text, usd_text
from tpu_lab.views.sharding import (
    CHIP_COLORS,
    LayoutView,
    MeshRunView,
    PlanMemoryView,
    PlanView,
    ShardingView,
    natural_key,
    table_rows,
    view,
)

LLAMA4 = dict(TINY_LLAMA, num_key_value_heads=4)


@pytest.fixture(scope="module")
def tiny_plan():
    return plan(LlamaConfig(**LLAMA4), chips=4, batch=2, seq=16)


def test_three_dim_tensor_on_a_two_dim_mesh():
    info = layout_info((8, 6, 4), torch.bfloat16, (2, 2), (shard(0), shard(2)), ("dp", "tp"))
    assert view(info, name="x").to_text(72) == """\
x: bf16[8, 6, 4] on mesh dp=2 x tp=2, Shard(0), Shard(2); 384 B in all
  chip  mesh      local shape   bytes       slices
     0  (0,0)     4 x 6 x 2     96 B        [0:4, 0:6, 0:2]
     1  (0,1)     4 x 6 x 2     96 B        [0:4, 0:6, 2:4]
     2  (1,0)     4 x 6 x 2     96 B        [4:8, 0:6, 0:2]
     3  (1,1)     4 x 6 x 2     96 B        [4:8, 0:6, 2:4]
picture: dim 0 (8) rows x dim 2 (4) columns; not drawn: dim 1 (whole)
┌────────────────────────────┬────────────────────────────┐
│ chip 0                     │ chip 1                     │ 0:4
├────────────────────────────┼────────────────────────────┤
│ chip 2                     │ chip 3                     │ 4:8
└────────────────────────────┴────────────────────────────┘
 0:2                          2:4"""


def test_fused_blocks_and_replicated_tensors():
    fused = layout_info((16,), torch.float32, (4,), (Split("shard", 0, split_factor=2),))
    assert ShardingView(fused, "gate_up.bias").to_text(76) == """\
gate_up.bias: f32[16] on mesh tp=4, _StridedShard(dim=0, split_factor=2); 6…
  chip  mesh      local shape   bytes       slices
     0  (0)       4             16 B        [0:2] [8:10]
     1  (1)       4             16 B        [2:4] [10:12]
     2  (2)       4             16 B        [4:6] [12:14]
     3  (3)       4             16 B        [6:8] [14:16]
picture: dim 0 (16) left to right
┌────────┬────────┬────────┬────────┬────────┬────────┬────────┬────────┐
│ chip 0 │ chip 1 │ chip 2 │ chip 3 │ chip 0 │ chip 1 │ chip 2 │ chip 3 │
└────────┴────────┴────────┴────────┴────────┴────────┴────────┴────────┘
 0:2      2:4      4:6      6:8      8:10     10:12    12:14    14:16"""
    whole = layout_info((4, 3), torch.float32, (4,), (REPLICATE,))
    assert view(whole, name="norm").to_text(60).splitlines()[-4:] == [
        "picture: dim 0 (4) rows x dim 1 (3) columns",
        "┌────────────────────────────────────────────┐",
        "│ all 4 chips                                │ 0:4",
        "└────────────────────────────────────────────┘",
    ]


def test_layout_table_sorted_by_bytes_per_chip(tiny_plan):
    """Heaviest first; a tensor of every layer is one row; a name too long for the column gets
    a line of its own, never cut."""
    assert LayoutView(tiny_plan.layout, limit=4).to_text(80) == """\
LlamaForCausalLM on 4 chips (mesh tp=4): 23 tensors, 449.31 KiB unsharded,
  113.31 KiB per chip
  tensor                shape dtype placement style                     per chip
  lm_head.weight     256 x 64 f32   Shard(0)  colwise_gather_output    16.00 KiB
  model.embed_tokens.weight
                     256 x 64 f32   Shard(0)  embedding_rowwise        16.00 KiB
  model.layers.{0-1}.mlp.down_proj.weight
                     64 x 128 f32   Shard(1)  rowwise               2 x 8.00 KiB
  model.layers.{0-1}.mlp.gate_proj.weight
                     128 x 64 f32   Shard(0)  colwise               2 x 8.00 KiB
  … 17 more tensors, 49.31 KiB per chip"""


def test_layout_rows_natural_order_and_every_kind_of_weight_shown():
    """A 7B-shaped model: 293 tensors in 14 rows, so its attention weights show (sorted as
    text, the 25 rows held lm_head, the embedding and 23 of the 96 MLP weights); layer numbers
    sort as numbers."""
    llama7b = LlamaConfig(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                          num_attention_heads=32, num_key_value_heads=8, vocab_size=32000)
    layout = plan(llama7b, chips=4, generation="v5e", dtype=torch.bfloat16).layout
    rows = table_rows(layout)
    assert [r.name for r in rows][:9] == [
        "lm_head.weight", "model.embed_tokens.weight",
        "model.layers.{0-31}.mlp.down_proj.weight", "model.layers.{0-31}.mlp.gate_proj.weight",
        "model.layers.{0-31}.mlp.up_proj.weight", "model.layers.{0-31}.self_attn.o_proj.weight",
        "model.layers.{0-31}.self_attn.q_proj.weight",
        "model.layers.{0-31}.self_attn.k_proj.weight",
        "model.layers.{0-31}.self_attn.v_proj.weight",
    ]
    assert sum(len(r.entries) for r in rows) == 293 and len(rows) == 14
    assert "… " not in LayoutView(layout).to_text(120)  # nothing left out
    assert "32 x 21.50 MiB" in LayoutView(layout).to_text(120)
    assert sorted(["layers.10.w", "layers.2.w", "layers.1.w"], key=natural_key) == [
        "layers.1.w", "layers.2.w", "layers.10.w"]
    assert [e.name.split(".")[2] for e in rows[2].entries] == [str(n) for n in range(32)]


def test_hbm_bars_against_capacity():
    gib = 1 << 30
    bars = PlanMemoryView([(("weights", 10 * gib), ("activations saved for backward", 6 * gib)),
                           (("weights", 2 * gib), ("temporaries", 6 * gib)),
                           (("weights", 15 * gib), ("optimizer state", 6 * gib))],
                          16 * gib, "HBM, TPU v5e", note="at the peak")
    assert bars.to_text(80) == """\
HBM, TPU v5e: 16.00 GiB per chip
  █ weights, ▚ activations saved for backward, ░ temporaries, ▒ optimizer state,
  · free
  at the peak
  chip 0  │███████████████▚▚▚▚▚▚▚▚▚│ 16.00 GiB (100%)
  chip 1  │███░░░░░░░░░············│ 8.00 GiB (50%)
  chip 2  │██████████████████████▒▒│ 21.00 GiB (131%) OVER"""
    assert "#dc2626" in bars.to_html()  # the chip over capacity is outlined red


def test_plan_text(tiny_plan):
    estimate = tiny_plan.estimate("forward")
    peak = format_bytes(int(estimate.peak_hbm_bytes))
    assert view(tiny_plan).to_text(80).splitlines()[:19] == [
        "Plan: LlamaForCausalLM (config), tensor parallel over 4 chips of TPU v6e",
        "  (v6e-4), f32 weights",
        f"fits in HBM: peak {peak} of 32.00 GiB per chip (estimate, compiled), forward",
        "  step",
        f"at the peak ({estimate.memory.at}): weights 113.31 KiB, temporaries "
        f"{format_bytes(int(estimate.memory.of('temporaries')))}, inputs 256 B",
        "weights: 113.31 KiB per chip (449.31 KiB unsharded)",
        "Estimated TPU time (estimate of an idealised chip, not a measurement):",
        "  LlamaForCausalLM forward: batch 2 x seq 16 on 4 x TPU v6e (Trillium) (tp 4)",
        f"expected about {seconds_text(estimate.expected_seconds)} (idealised bound "
        f"{seconds_text(estimate.seconds)}) on TPU v6e (Trillium)",
        f"  (compiled), {estimate.bound}-bound; {estimate.expected_throughput:,.0f} tokens/s on "
        "all chips",
        f"list price (not a quote) {usd_text(estimate.usd_per_step())} per step on 4 chips at "
        "$2.70 per chip-hour",
        "  on-demand (us-central1, read 2026-12-06); "
        f"{usd_text(estimate.usd_per(1e6))} per million tokens",
        "HBM, TPU v6e: 32.00 GiB per chip",
        "  █ weights, ░ temporaries, ▪ inputs, · free",
        "  at the estimated peak of the forward step (compiled), at "
        f"{estimate.memory.at}: an estimate,",
        "  not a measurement",
        f"  chip 0  │························│ {peak} (<1%)",
        f"  chip 1  │························│ {peak} (<1%)",
        f"  chip 2  │························│ {peak} (<1%)",
    ]
    assert format_bytes(int(sum(n for _, n in estimate.memory.breakdown))) == peak
    bundle = view(tiny_plan)._repr_mimebundle_()
    assert set(bundle) == {"text/plain", "text/html"}
    assert tpu_lab.view(tiny_plan).to_text(80) == view(tiny_plan).to_text(80)


def test_html_is_escaped_and_self_contained(tiny_plan):
    info = layout_info((8, 4), torch.float32, (4,), (shard(0),))
    pages = [ShardingView(info, "<img src=x onerror=alert(1)>").to_html(), view(tiny_plan).to_html()]
    for page in pages:
        assert "<script" not in page and "<img" not in page
        assert "http" not in page and "src=" not in page.replace("&lt;img src=", "")
    assert "&lt;img src=x onerror=alert(1)&gt;" in pages[0]
    assert all(c in pages[0] for c in CHIP_COLORS[:4])
    assert "lm_head.weight" in pages[1] and "colwise_gather_output" in pages[1]


def test_view_dispatches_on_what_it_is_given(tiny_plan):
    drawn = view(tiny_plan)
    assert isinstance(drawn, PlanView) and drawn.plan is tiny_plan and view(drawn) is drawn
    assert isinstance(view(torch.ones(2, 3)), ShardingView)
    lin = torch.nn.Linear(4, 2)
    table = view(lin)
    assert isinstance(table, LayoutView) and table.layout == model_layout(lin)
    assert isinstance(view(tiny_plan.layout), LayoutView)
    assert view(tiny_plan.layout["lm_head.weight"].info, name="head").name == "head"
    with pytest.raises(ShardingError, match="Cannot draw the sharding of a dict"):
        view({})
    estimate = tiny_plan.estimate("train")
    with_estimate = view(tiny_plan, estimate=estimate)
    assert with_estimate.estimate is estimate and drawn.estimate.task == "forward"
    assert with_estimate.to_text(200).splitlines()[1].endswith("train step")
    with pytest.raises(ShardingError, match="^estimate= goes with a Plan, not a ModelLayout.$"):
        view(tiny_plan.layout, estimate=estimate)
    # tpu_lab.view draws tensors and modules as their sharding too, and a plan with its step
    assert isinstance(tpu_lab.view(torch.ones(2, 3), name="x"), ShardingView)
    assert tpu_lab.view(lin).layout == model_layout(lin)
    assert tpu_lab.view(tiny_plan, estimate=estimate).estimate is estimate


def test_mesh_run_view():
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 8))
    run = simulate(mlp, torch.randn(2, 8), chips=2, tp_plan={"0": "colwise", "2": "rowwise"})
    assert isinstance(view(run), MeshRunView) and isinstance(tpu_lab.view(run), MeshRunView)
    lines = view(run).to_text(90).splitlines()
    assert lines[0] == ("Simulated mesh: Sequential, tensor parallel over 2 chips (one process, "
                        "CPU shards,")
    table = view(run).to_text(90).splitlines()[-6:]  # the plan's styles, no empty column
    assert table[1].split() == ["tensor", "shape", "dtype", "placement", "style", "per", "chip"]
    assert table[2].split()[:1] + table[2].split()[-3:] == ["0.weight", "colwise", "256", "B"]
    assert lines[2].startswith("output vs unsharded: max |diff| ")
    assert "equal within rtol 0.0001 atol 1e-05 on every chip" in view(run).to_text(200)
    assert "communication in the forward: all_reduce x1" in lines
    # up: half of 16x8 + half of 8 bias; down: half of 8x16 + whole 8 bias: 144 floats
    assert "real shards per chip: 576 B, 576 B" in lines
    assert "equal within" in view(run).to_html()


def test_figures_of_a_plan_a_run_and_a_tensor(tiny_plan):
    from matplotlib.figure import Figure

    info = layout_info((8, 6, 4), torch.bfloat16, (2, 2), (shard(0), shard(2)), ("dp", "tp"))
    for fig in (figure(tiny_plan), figure(info), figure(tiny_plan.layout),
                figure(torch.ones(2, 3), name="ones")):
        assert isinstance(fig, Figure) and len(fig.axes) == 2
        png = io.BytesIO()
        fig.savefig(png, format="png")
        assert png.getvalue().startswith(b"\x89PNG")
    mesh_axis = figure(tiny_plan).axes[0]  # the weights at rest
    assert [t.get_text() for t in mesh_axis.texts][:2] == ["chip 0\n113.31 KiB",
                                                           "chip 1\n113.31 KiB"]
    peak = format_bytes(int(tiny_plan.estimate("train").peak_hbm_bytes))
    at_peak = figure(tiny_plan, estimate=tiny_plan.estimate("train")).axes[0]
    assert [t.get_text() for t in at_peak.texts][0] == f"chip 0\n{peak}"
