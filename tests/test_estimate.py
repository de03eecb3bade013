"""The estimate engine: the chip table, FLOPs against PyTorch's counter, the scaling book's
roofline examples, MXU padding, bytes, eager against fused, collectives, FX graphs, the
settable assumptions, and the estimate's picture."""

from __future__ import annotations

import math

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode, flop_registry

from tpu_lab.errors import TpuLabError
from tpu_lab.estimate import (
    CHIPS,
    TensorSpec,
    assume,
    assumptions,
    chip,
    estimate,
    estimate_graph,
    op_cost,
    settings,
    signature,
)
from tpu_lab.estimate.collectives import ring_bytes, seconds
from tpu_lab.estimate.ops import OpSignature, flops, op_name
from tpu_lab.estimate.trace import Recorder
from tpu_lab.hardware.topology import GENERATIONS
from tpu_lab.views import view
from tpu_lab.views.estimate import EstimateView, seconds_text

aten = torch.ops.aten
BF16 = torch.bfloat16


def meta(*shape, dtype=BF16, grad=False):
    return torch.empty(*shape, device="meta", dtype=dtype, requires_grad=grad)


# --- the chip table ------------------------------------------------------------------------


def test_the_chip_table_holds_the_published_figures_with_a_source_for_each():
    v6e, v5e, v7 = CHIPS["v6e"], CHIPS["v5e"], CHIPS["v7"]
    assert (v6e.bf16_flops, v6e.int8_ops, v6e.hbm_bandwidth, v6e.mxu, v6e.mxus) == (
        918e12, 1836e12, 1638e9, 256, 2)
    assert (v5e.bf16_flops, v5e.hbm_bandwidth, v5e.hbm_bytes, v5e.mxu, v5e.ici_links) == (
        197e12, 819e9, 16 << 30, 128, 4)
    assert (v7.bf16_flops, v7.fp8_flops, v7.hbm_bytes, v7.tensorcores) == (
        2307e12, 4614e12, 192 << 30, 2)
    assert CHIPS["v4"].bf16_flops == 275e12 and CHIPS["v5p"].hbm_bandwidth == 2765e9
    for c in CHIPS.values():
        sourced = {"bf16_flops", "hbm_bytes", "hbm_bandwidth", "ici_bidirectional",
                   "ici_links", "dcn_bandwidth", "mxu", "mxus_per_core", "tensorcores",
                   "pod_chips"}
        assert sourced <= set(c.sources), c.name
    # v5e's 400 GB/s bidirectional over 4 ports: 50 GB/s each way per link
    assert v5e.ici_link_bandwidth == 50e9 and v5e.ici_bandwidth == 200e9
    assert v5e.peak_flops("fp8") == v5e.bf16_flops  # no published fp8 rate: the bf16 one


def test_generations_read_the_chip_table_and_keep_their_public_behaviour():
    for name, gen in GENERATIONS.items():
        assert gen.chip is CHIPS[name]
        assert gen.hbm_per_device == CHIPS[name].hbm_bytes // gen.devices_per_chip
    assert GENERATIONS["v7"].hbm_per_device == 96 << 30
    assert (GENERATIONS["v6e"].peak_bf16_tflops, GENERATIONS["v5e"].hbm_gb_per_s) == (918, 819)
    device = GENERATIONS["v7"].device  # one of the two devices of a TPU7x chip
    assert (device.bf16_flops, device.hbm_bandwidth, device.hbm_bytes) == (
        2307e12 / 2, 7380e9 / 2, 96 << 30)
    assert chip("v6e-4") is CHIPS["v6e"] and chip("TPU v5e") is CHIPS["v5e"]
    with pytest.raises(TpuLabError, match="Unknown TPU generation 'v9'"):
        chip("v9")


# --- FLOPs: PyTorch's own counter ---------------------------------------------------------

FLOP_CASES = {
    "addmm": lambda: torch.nn.functional.linear(meta(4, 8, 16), meta(32, 16), meta(32)),
    "mm, bmm, baddbmm": lambda: (meta(8, 16) @ meta(16, 4), torch.bmm(meta(3, 8, 16),
                                 meta(3, 16, 4)), torch.baddbmm(meta(3, 8, 4), meta(3, 8, 16),
                                                                meta(3, 16, 4))),
    "convolution and its backward": lambda: torch.nn.functional.conv2d(
        meta(2, 3, 16, 16, grad=True), meta(8, 3, 3, 3, grad=True), stride=2).sum().backward(),
    "_convolution": lambda: aten._convolution(meta(1, 3, 8, 8), meta(4, 3, 3, 3), None, [1, 1],
                                              [0, 0], [1, 1], False, [0, 0], 1, False, False,
                                              False, False),
    "flash attention and its backward": lambda: aten._scaled_dot_product_flash_attention(
        *(meta(1, 4, 32, 16, grad=True) for _ in range(3)), 0.0, True, False)[0]
    .sum().backward(),
    "efficient attention and its backward": lambda: aten._scaled_dot_product_efficient_attention(
        *(meta(1, 4, 32, 16, grad=True) for _ in range(3)), meta(1, 4, 32, 32), True)[0]
    .sum().backward(),
    "cudnn attention and its backward": lambda: aten._scaled_dot_product_cudnn_attention(
        *(meta(1, 4, 32, 16, grad=True) for _ in range(3)), None, True, 0.0, False, False)[0]
    .sum().backward(),
    "_flash_attention_forward/backward": lambda: (
        aten._flash_attention_forward(*(meta(2, 32, 4, 16) for _ in range(3)), None, None, 32,
                                      32, 0.0, False, False),
        aten._flash_attention_backward(*(meta(2, 32, 4, 16) for _ in range(5)),
                                       meta(2, 4, 32, dtype=torch.float32), None, None, 32, 32,
                                       0.0, False, meta(2, dtype=torch.int64),
                                       meta(2, dtype=torch.int64))),
    "_efficient_attention_forward/backward": lambda: (
        aten._efficient_attention_forward(*(meta(2, 32, 4, 16) for _ in range(3)), None, None,
                                          None, 32, 32, 0.0, 0, True),
        aten._efficient_attention_backward(*(meta(2, 32, 4, 16) for _ in range(3)),
                                           meta(2, 32, 4, 16), None, meta(2, 32, 4, 16), None,
                                           None, 32, 32, meta(2, 4, 32, dtype=torch.float32),
                                           0.0, meta(2, dtype=torch.int64),
                                           meta(2, dtype=torch.int64), 0, False)),
    "_scaled_mm": lambda: aten._scaled_mm(
        meta(16, 32, dtype=torch.float8_e4m3fn), meta(16, 32, dtype=torch.float8_e4m3fn).t(),
        torch.ones((), device="meta"), torch.ones((), device="meta"), out_dtype=BF16),
}
#: Registry entries no case runs: no kernel for meta (or CPU) tensors here, a formula that
#: FlopCounterMode itself cannot call in this torch (_slow_conv2d_forward), and the flex
#: attention higher-order ops (which a dispatch mode does not see as one op).
NOT_RUN = {"aten.cudnn_convolution", "aten.convolution_overrideable",
           "aten._slow_conv2d_forward", "flex_attention", "flex_attention_backward"}


def _counted(case) -> tuple[dict, dict]:
    with FlopCounterMode(display=False) as counter:
        case()
    want = {str(k): v for k, v in counter.get_flop_counts()["Global"].items()}
    rec = Recorder()
    with rec:
        case()
    got: dict[str, int] = {}
    for r in rec.program.records:
        n = flops(r.sig)
        if n:
            got[op_name(r.sig.func)] = got.get(op_name(r.sig.func), 0) + n
    return want, got


@pytest.mark.parametrize("name", list(FLOP_CASES))
def test_flops_equal_flop_counter_mode_on_the_same_ops(name):
    want, got = _counted(FLOP_CASES[name])
    assert want and got == want


def test_the_flop_cases_cover_every_op_the_counter_counts():
    covered = {op for case in FLOP_CASES.values() for op in _counted(case)[0]}
    assert covered | NOT_RUN == {str(k) for k in flop_registry}


# --- the scaling book's roofline chapter --------------------------------------------------


def test_a_bf16_matmul_has_the_roofline_chapters_arithmetic_intensity():
    """jax-ml/scaling-book roofline.md, "Matrix multiplication": X bf16[B, D] times Y bf16[D, F]
    loads 2BD + 2DF bytes, does 2BDF FLOPs and writes 2BF bytes, so Intensity(matmul) =
    BDF / (BD + DF + BF), about B when B is small against D and F."""
    B, D, F = 256, 8192, 16384
    x, y = meta(B, D), meta(D, F)
    cost = op_cost(signature(aten.mm.default, (x, y), {}, x @ y), "v5e", launch=False)
    assert cost.flops == 2 * B * D * F
    assert cost.hbm_bytes == 2 * B * D + 2 * D * F + 2 * B * F
    assert cost.intensity == pytest.approx(B * D * F / (B * D + D * F + B * F))
    assert cost.intensity == pytest.approx(B, rel=0.05)


def test_v5e_and_v6e_turn_compute_bound_at_the_roofline_chapters_batch_sizes():
    """roofline.md: "Intensity(matmul) > Intensity(TPU) => B > 1.97e14 / 8.20e11 = 240" (TPU
    v5e); for TPU v6e the scaling book's chip table gives 9.20e14 FLOPs/s and 1.6e12 bytes/s,
    575. The published figures this table uses (197 TFLOP/s, 819 GB/s; 918 TFLOP/s,
    1638 GB/s) give 240.5 and 560."""
    assert round(1.97e14 / 8.20e11) == 240 and round(9.20e14 / 1.6e12) == 575
    assert CHIPS["v5e"].critical_intensity == pytest.approx(240, rel=0.01)
    assert CHIPS["v6e"].critical_intensity == pytest.approx(575, rel=0.03)
    D = F = 1 << 16  # B small against D and F, as the chapter assumes
    for name, below, above in (("v5e", 240, 248), ("v6e", 568, 576)):
        ridge = CHIPS[name].critical_intensity
        assert below < ridge / (1 - 2 * ridge / D) < above  # BDF/(BD+DF+BF) = ridge, exactly
        bounds = []
        for B in (below, above):
            x, y = meta(B, D), meta(D, F)
            bounds.append(op_cost(signature(aten.mm.default, (x, y), {}, x @ y), name,
                                  launch=False).bound)
        assert bounds == ["memory", "compute"], name


# --- padding and bytes -----------------------------------------------------------------------


def test_matmul_dims_round_up_to_the_mxu_tile_and_the_waste_shows():
    x, y = meta(100, 100), meta(100, 100)
    sig = signature(aten.mm.default, (x, y), {}, x @ y)
    on_v5e, on_v6e = op_cost(sig, "v5e"), op_cost(sig, "v6e")
    assert on_v5e.flops == on_v6e.flops == 2 * 100**3
    assert on_v5e.padded_flops == 2 * 104 * 128 * 128  # rows to 8, K and N to 128
    assert on_v6e.padded_flops == 2 * 104 * 256 * 256  # ... to 256 from v6e
    e = estimate(lambda: x @ y, on="v6e", mode="eager")
    assert e.padding_waste == pytest.approx(1 - 100**3 / (104 * 256 * 256))


def test_a_signature_can_be_built_from_shapes_and_dtypes_alone():
    spec = TensorSpec((8, 16), BF16, 128)
    sig = OpSignature(aten.mm.default, (spec, TensorSpec((16, 32), BF16, 512)), (),
                      (TensorSpec((8, 32), BF16, 256),))
    x, y = meta(8, 16), meta(16, 32)
    assert sig == signature(aten.mm.default, (x, y), {}, x @ y)
    assert op_cost(sig).flops == 2 * 8 * 16 * 32


def test_bytes_count_what_a_tensor_holds_and_only_the_part_an_update_writes():
    small = meta(4, 1, 64)
    wide = small.expand(4, 32, 64)  # holds 4 x 64 elements
    assert signature(aten.clone.default, (wide,), {}, wide.clone()).args[0].nbytes == 4 * 64 * 2
    cache, new = meta(2, 8, 1024, 64), meta(2, 8, 1, 64)
    pos = torch.zeros(1, dtype=torch.long, device="meta")
    out = cache.index_copy(2, pos, new)
    cost = op_cost(signature(aten.index_copy.default, (cache, 2, pos, new), {}, out),
                   launch=False)
    assert cost.hbm_bytes == 2 * new.nbytes + pos.nbytes  # read the update, write it
    view_cost = op_cost(signature(aten.view.default, (cache, [-1]), {}, cache.view(-1)))
    assert (view_cost.hbm_bytes, view_cost.seconds) == (0, 0.0)


# --- eager against fused ------------------------------------------------------------------


def _chain(x):
    return torch.relu(x * 2 + 1)


def test_eager_ops_each_read_and_write_hbm_and_a_fused_graph_keeps_intermediates_on_chip():
    x = meta(1024, 1024)
    nbytes = x.nbytes
    eager = estimate(_chain, x, on="v6e", mode="eager")
    fused = estimate(_chain, x, on="v6e", mode="compiled")
    assert eager.hbm_bytes == 6 * nbytes  # mul, add, relu: each reads and writes
    assert fused.hbm_bytes == 2 * nbytes  # one fusion: read x, write the result
    a = assumptions()
    assert eager.launch_seconds == 3 * a.eager_launch_seconds
    assert fused.launch_seconds == a.graph_launch_seconds
    assert eager.seconds == pytest.approx(6 * nbytes / CHIPS["v6e"].hbm_bandwidth
                                          + 3 * a.eager_launch_seconds)
    assert fused.bound == eager.bound == "launch"  # 4 MiB of traffic: the launches dominate
    assert estimate(_chain, meta(4096, 4096), mode="compiled").bound == "memory"


def test_broadcast_heads_fuse_into_attention_and_count_their_bytes_once():
    q, kv = meta(1, 32, 256, 128), meta(1, 8, 256, 128)

    def attend(q, kv):
        k = kv[:, :, None].expand(1, 8, 4, 256, 128).reshape(1, 32, 256, 128)
        return aten._scaled_dot_product_flash_attention(q, k, k, 0.0, True, False)[0]

    fused = estimate(attend, q, kv, mode="compiled")
    eager = estimate(attend, q, kv, mode="eager")
    outputs = aten._scaled_dot_product_flash_attention(q, q, q, 0.0, True, False)
    written = sum(t.nbytes for t in outputs if isinstance(t, torch.Tensor))  # out, logsumexp...
    assert fused.hbm_bytes == q.nbytes + kv.nbytes + written
    assert eager.hbm_bytes > fused.hbm_bytes + 4 * kv.nbytes  # the copy of the heads


def test_a_time_is_never_below_the_physical_limit():
    x, w = meta(512, 4096), meta(4096, 4096)
    for mode in ("eager", "compiled"):
        e = estimate(lambda: torch.relu(x @ w), mode=mode)
        assert e.seconds >= e.flops / e.chip.bf16_flops
        assert e.seconds >= e.hbm_bytes / e.chip.hbm_bandwidth


# --- collectives ------------------------------------------------------------------------------


def test_ring_collectives_send_the_textbook_bytes_and_pay_a_hop_per_step():
    n, g = 1 << 30, 8
    assert ring_bytes("all_gather", n, g) == ring_bytes("reduce_scatter", n, g) == n * 7 / 8
    assert ring_bytes("all_reduce", n, g) == 2 * n * 7 / 8
    assert ring_bytes("all_reduce", n, 1) == 0
    v5p, a = CHIPS["v5p"], assumptions()
    assert seconds("all_reduce", n, g, v5p, "ici", a) == pytest.approx(
        2 * n * 7 / 8 / 600e9 + 14 * a.hop_seconds)
    assert seconds("all_gather", n, g, v5p, "dcn", a) == pytest.approx(
        n * 7 / 8 / 6.25e9 + 7 * a.hop_seconds)
    with pytest.raises(TpuLabError, match="Unknown collective 'gather'"):
        ring_bytes("gather", n, g)


# --- FX graphs ----------------------------------------------------------------------------------


class _MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up, self.down = torch.nn.Linear(64, 256), torch.nn.Linear(256, 64)

    def forward(self, x):
        return self.down(torch.nn.functional.gelu(self.up(x)))


def test_an_fx_graph_is_estimated_from_node_meta_val_dynamo_and_aten_level():
    from torch._functorch.aot_autograd import aot_module_simplified

    graphs = {}

    def dynamo(gm, example_inputs):
        graphs["dynamo"] = gm

        def aten_level(g, _):
            graphs["aten"] = g
            return g.forward

        return aot_module_simplified(gm, example_inputs, fw_compiler=aten_level)

    torch.manual_seed(0)
    model, x = _MLP(), torch.randn(32, 64)
    torch.compile(model, backend=dynamo, fullgraph=True, dynamic=False)(x)
    with FlopCounterMode(display=False) as counter:
        model(x)
    for name in ("dynamo", "aten"):
        e = estimate_graph(graphs[name], "v6e")
        assert e.flops == counter.get_total_flops(), name
        assert e.mode == "compiled" and e.seconds > 0


# --- assumptions ------------------------------------------------------------------------------


def test_assumptions_are_settable_for_the_session_and_for_a_block():
    x = meta(64, 64)
    base = estimate(_chain, x, mode="eager").launch_seconds
    try:
        settings.eager_launch_seconds = 1e-3
        assert assumptions().eager_launch_seconds == 1e-3
        assert estimate(_chain, x, mode="eager").launch_seconds == pytest.approx(3e-3)
    finally:
        settings.reset()
    assert estimate(_chain, x, mode="eager").launch_seconds == base
    with pytest.raises(RuntimeError), assume(hop_seconds=5e-6):
        assert assumptions().hop_seconds == 5e-6
        raise RuntimeError("inside")
    assert assumptions().hop_seconds == 1e-6  # restored even after the error
    with pytest.raises(TpuLabError) as e, assume(launch=1):
        pass
    assert str(e.value).startswith("Unknown assumption 'launch'; the assumptions are ")
    with pytest.raises(TpuLabError, match="must be a number >= 0, got -1"):
        settings.hop_seconds = -1


# --- the picture ------------------------------------------------------------------------------


def test_an_estimate_draws_as_text_at_a_fixed_width_and_as_html():
    x, w = meta(256, 1024), meta(1024, 1024)
    e = estimate(lambda: torch.relu(x @ w), on="v5e", mode="eager", title="relu(x @ w)")
    assert isinstance(view(e), EstimateView)
    assert view(e).to_text(width=100) == (
        "Estimated TPU time (estimate of an idealised chip, not a measurement): relu(x @ w)\n"
        f"expected about {seconds_text(e.expected_seconds)} (idealised bound 25.1 µs) on TPU "
        "v5e (eager), launch-bound\n"
        "537 MFLOP (padded to the 128x128 MXU: 537 MFLOP, waste 0.0%); MXU utilisation 10.8%; "
        "HBM 4.00 MiB\n"
        "time terms: MXU 2.73 µs, HBM 5.12 µs, launches 20 µs\n"
        "fits in HBM: peak 3.50 MiB of 16.00 GiB per chip (estimate, eager); at the peak "
        "(aten.relu): inputs\n"
        "  2.50 MiB, temporaries 1.00 MiB\n"
        "  op                  count      time  share bound            FLOPs        HBM\n"
        "  aten.mm 256x1024        1   13.8 µs  55.1% launch       537 MFLOP   3.00 MiB\n"
        "  aten.relu 256x1024      1   11.3 µs  44.9% launch               -   1.00 MiB"
    )
    html = view(e).to_html()
    assert "estimate of an idealised chip, not a measurement" in html
    assert "<td>aten.mm 256x1024</td>" in html
    mib, bw = 1 << 20, CHIPS["v5e"].hbm_bandwidth  # the matmul moves 3 MiB, relu 1 MiB
    assert math.isclose(e.seconds, 4 * mib / bw + 2 * 10e-6)


def test_the_roofline_figure_draws_each_op_and_the_estimate_under_the_chips_roofline():
    from tpu_lab.estimate import roofline

    x, w = meta(256, 1024), meta(1024, 1024)
    e = estimate(lambda: torch.relu(x @ w), on="v6e", mode="eager", title="relu(x @ w)")
    fig = roofline(e)
    ax = fig.axes[0]
    (line,) = ax.get_lines()
    assert max(line.get_ydata()) == CHIPS["v6e"].bf16_flops  # the flat roof: peak FLOP/s
    assert len(ax.collections) == 2  # the matmul, and the whole estimate (relu has no FLOPs)
    assert ax.get_title() == "Roofline: estimate of an idealised chip"
    assert "1 op kinds without MXU FLOPs" in fig.texts[0].get_text()
    import matplotlib.pyplot as plt

    plt.close(fig)


def test_real_tpu_tensors_estimate_like_meta_tensors_and_the_public_names_resolve():
    import tpu_lab.estimate as est

    torch.manual_seed(0)
    x, w = torch.randn(64, 128, device="tpu"), torch.randn(128, 32, device="tpu")
    mx, mw = meta(64, 128, dtype=torch.float32), meta(128, 32, dtype=torch.float32)
    real = estimate(lambda: torch.relu(x @ w), on="v5e", mode="eager")
    fake = estimate(lambda: torch.relu(mx @ mw), on="v5e", mode="eager")
    assert (real.flops, real.hbm_bytes, real.seconds) == (fake.flops, fake.hbm_bytes,
                                                          fake.seconds)
    for name in est.__all__:
        assert getattr(est, name) is not None


def test_the_roofline_draws_each_chips_points_in_its_lines_colour():
    """Notebook 09's picture: a v5e star in the v5e roofline's colour, v6e stars in v6e's."""
    pytest.importorskip("matplotlib")
    from matplotlib.colors import to_hex

    from tpu_lab.estimate import estimate, roofline

    w = torch.empty(8192, 8192, device="meta", dtype=torch.bfloat16)
    shown = [estimate(lambda x: x @ w, torch.empty(b, 8192, device="meta", dtype=torch.bfloat16),
                      on=on, title=on) for on, b in (("v6e", 16), ("v5e", 1024), ("v6e", 1024))]
    ax = roofline(*shown, top=0).axes[0]
    lines = {line.get_label().split(" roofline")[0]: to_hex(line.get_color())
             for line in ax.get_lines()}
    stars = [(c.get_label(), to_hex(c.get_facecolor()[0])) for c in ax.collections]
    assert stars == [("v6e", lines["TPU v6e (Trillium)"]), ("v5e", lines["TPU v5e"]),
                     ("v6e", lines["TPU v6e (Trillium)"])]
