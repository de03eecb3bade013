"""The simulated eager compile cache: DEFER_AND_FUSE's graphs (statistics, explanations) and
DEFER_NEVER's single-op graphs (statistics), as TorchTPU's one cache counts them."""

from __future__ import annotations

import re

import pytest
import torch

from tpu_lab import events

FUSE = torch.tpu.EagerMode.DEFER_AND_FUSE


@pytest.fixture
def fresh():
    torch.tpu._clear_cache()
    events.log.clear()
    yield
    torch.tpu._clear_cache()


def _step(w, length, bucket=None):
    """A decode-like step over ``length`` positions (padded on the host to ``bucket``), synced
    by .item(). Inputs come from the host, as a served request does."""
    x = torch.full((1, length, 16), 0.5)
    if bucket is not None:
        x = torch.nn.functional.pad(x, (0, 0, 0, bucket - length))
    x = x.to("tpu")
    scores = (x @ w) @ x.transpose(1, 2)
    return scores.softmax(-1).sum().item()


def test_growing_length_misses_once_per_length_then_hits(fresh):
    w = torch.randn(16, 16).to("tpu")
    lengths = [3, 4, 5, 3, 4, 5, 5]
    with torch.tpu.set_eager_mode(FUSE):
        fused = [_step(w, n) for n in lengths]
    assert torch.tpu._get_cache_requests() == 7
    assert torch.tpu._get_cache_misses() == 3
    assert torch.tpu._get_cache_hits() == 4
    eager = [_step(w, n) for n in lengths]
    assert fused == eager  # the mode changes no number
    misses = events.log.events("cache_miss")
    # the first op the device sees: matmul whole (Python core) or its first piece (compiled)
    for miss, (new, old) in zip(misses[1:], ((4, 3), (5, 4)), strict=True):
        assert re.fullmatch(
            rf"op 0 \(aten\.(matmul|view)\) argument 0 shape \[1, {new}, 16\] vs cached "
            rf"\[1, {old}, 16\]: dimension 1 changed",
            miss.details["changes"][0],
        )
    assert "pad or bucket" in misses[1].details["hints"][0]
    assert all(e.where.startswith(__file__) for e in misses)  # the test's own sync line


def test_padded_to_a_bucket_no_new_misses(fresh):
    w = torch.randn(16, 16).to("tpu")
    with torch.tpu.set_eager_mode(FUSE):
        for n in (3, 4, 5, 6, 7):
            _step(w, n, bucket=8)
    assert torch.tpu._get_cache_misses() == 1
    assert torch.tpu._get_cache_hits() == 4
    stats = torch.tpu._get_cache_stats()
    assert (stats.num_cache_reqs, stats.num_cache_hits, stats.num_compilations) == (5, 4, 1)
    assert stats.per_entry_stats[0].read_count == 4


def test_scalar_values_are_baked_in(fresh):
    x = torch.ones(4, device="tpu")
    with torch.tpu.set_eager_mode(FUSE):
        for scale in (0.25, 0.5):
            (x * scale).sum().item()
    change = events.log.events("cache_miss")[-1].details["changes"][0]
    assert re.fullmatch(
        r"op 0 \(aten\.mul\.(Tensor|out)\) argument 1: scalar 0\.5 vs cached 0\.25 baked into "
        r"the graph",
        change,
    )


def test_op_order_difference_is_explained(fresh):
    x = torch.ones(4, device="tpu")
    with torch.tpu.set_eager_mode(FUSE):
        (x.mul(2).add(1)).sum().item()
        (x.add(1).mul(2)).sum().item()
    change = events.log.events("cache_miss")[-1].details["changes"][0]
    assert change.startswith("op order differs at op 0: aten.add")


def test_cache_only_mode_refuses_new_graphs(fresh):
    x = torch.ones(4, device="tpu")
    with torch.tpu.set_eager_mode(FUSE):
        x.sum().item()
        torch.tpu._set_cache_only(True)
        try:
            x.sum().item()  # cached: fine
            with pytest.raises(RuntimeError, match="Compilation cache miss in cache-only mode"):
                x.mean().item()
        finally:
            torch.tpu._set_cache_only(False)


def _requests_hits_misses() -> tuple[int, int, int]:
    tpu = torch.tpu
    return tpu._get_cache_requests(), tpu._get_cache_hits(), tpu._get_cache_misses()


@pytest.mark.parametrize("mode", ["DEFER_NEVER", "DEFER_NEVER_AND_LAUNCH_BLOCKING"])
def test_op_by_op_modes_compile_and_cache_every_op(fresh, mode):
    """TorchTPU compiles each eager op as a graph of its own, cached by op and arguments."""
    x = torch.ones(3, device="tpu")  # one op (a fill): one compilation
    with torch.tpu.set_eager_mode(torch.tpu.EagerMode[mode]):
        assert _requests_hits_misses() == (1, 0, 1)
        for _ in range(3):
            (x * 2).sum()
        assert _requests_hits_misses() == (7, 4, 3)
        x.view(1, 3).t()  # views are metadata: nothing compiles
        x.item() if x.numel() == 1 else x.cpu()  # a transfer compiles nothing either
        assert _requests_hits_misses() == (7, 4, 3)
        (x * 3).sum()  # the scalar is baked in: a new mul, the same sum
        torch.ones(4, device="tpu").sum()  # new shapes: new fill, new sum
        assert _requests_hits_misses() == (11, 5, 6)
    stats = torch.tpu._get_cache_stats()
    assert (stats.num_cache_reqs, stats.num_cache_hits, stats.num_compilations) == (11, 5, 6)
    assert sorted(e.read_count for e in stats.per_entry_stats) == [0, 0, 0, 0, 2, 3]
    assert events.log.events("cache_miss") == []  # counted, not explained op by op
    torch.tpu._clear_cache()
    assert _requests_hits_misses() == (0, 0, 0)


def test_graphs_and_single_ops_share_the_statistics(fresh):
    x = torch.ones(3, device="tpu")
    with torch.tpu.set_eager_mode(FUSE):  # ops recorded into a graph are not counted alone
        (x * 2).sum().item()
        (x * 2).sum().item()
    assert _requests_hits_misses() == (3, 1, 2)  # the fill, then one graph twice


def test_cache_only_mode_refuses_new_ops(fresh):
    x = torch.ones(3, device="tpu")
    x + 1
    torch.tpu._set_cache_only(True)
    try:
        x + 1  # cached: fine
        with pytest.raises(
            RuntimeError, match=r"Compilation cache miss in cache-only mode \(the op aten\.mul"
        ):
            x * 2
    finally:
        torch.tpu._set_cache_only(False)


def test_precision_and_excess_precision_are_part_of_every_key(fresh):
    a = torch.ones(4, 4, device="tpu")
    a @ a
    with torch.tpu.precision(torch.tpu.Precision.HIGHEST):
        a @ a  # another compiled matmul
        a + a  # not a matmul: the same op as before
    a + a
    assert _requests_hits_misses() == (5, 1, 4)  # fill, mm, mm at HIGHEST, add, add (hit)
    previous = torch.tpu.allow_excess_precision
    torch.tpu.allow_excess_precision = not previous
    try:
        a + a  # every op compiles anew for the new setting
    finally:
        torch.tpu.allow_excess_precision = previous
    assert _requests_hits_misses() == (6, 1, 5)
    with torch.tpu.set_eager_mode(FUSE):
        (a @ a).sum().item()
        with torch.tpu.precision(torch.tpu.Precision.HIGH):
            (a @ a).sum().item()
    change = events.log.events("cache_miss")[-1].details["changes"][0]
    assert re.fullmatch(
        r"op 0 \(aten\.(mm|matmul)\) at precision HIGH vs cached DEFAULT \(torch\.tpu\.precision\)",
        change,
    )
    torch.tpu.allow_excess_precision = not previous
    try:
        with torch.tpu.set_eager_mode(FUSE):
            (a @ a).sum().item()
    finally:
        torch.tpu.allow_excess_precision = previous
    change = events.log.events("cache_miss")[-1].details["changes"][0]
    assert change == (
        f"the same graph, compiled anew for torch.tpu.allow_excess_precision = {not previous} "
        f"(cached with {previous})"
    )


def test_runtime_facade_reports_the_cache(fresh):
    import tpu_lab

    x = torch.ones(4, device="tpu")
    with torch.tpu.set_eager_mode(FUSE):
        x.sum().item()
        x.sum().item()
    # the fill of torch.ones (an op of DEFER_NEVER), then one graph twice
    assert tpu_lab.backend().cache_stats() == {"requests": 3, "hits": 1, "misses": 2}


def test_cache_miss_explanation_and_storm(fresh):
    import tpu_lab

    w = torch.randn(16, 16).to("tpu")
    with torch.tpu.set_eager_mode(FUSE):
        for n in range(2, 8):
            _step(w, n)
    misses = events.log.events("cache_miss")
    assert [e.details["storm"] for e in misses] == [False, False, False, True, True, True]
    text = tpu_lab.explain().to_text(width=100)
    assert text.startswith("cache miss #")
    assert re.search(
        r"what changed       op 0 \(aten\.(matmul|view)\) argument 0 shape \[1, 7, 16\] vs cached",
        text,
    )
    assert "6 compilation(s) at this sync point" in text


def test_sync_points_of_tolist_print_and_control_flow(fresh):
    x = torch.arange(3.0).to("tpu")
    events.log.clear()
    x.tolist()
    assert events.log.events("sync")[-1].details["reason"] == "copy to host"
    if (x > 1).any():  # data-dependent control flow: bool(tensor) syncs
        pass
    assert events.log.events("sync")[-1].details["reason"] == "item"


def test_events_carry_the_ipython_cell(fresh):
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "tpu_lab")  # follows the cells: nothing else registers
    shell.run_cell("import torch", store_history=True)
    result = shell.run_cell("torch.ones(2, device='tpu').sum().item()", store_history=True)
    assert result.success
    cell = result.execution_count
    sync = events.log.events("sync")[-1]
    assert sync.cell == cell and sync.where == f"In[{cell}]:1"
    assert [e.seq for e in events.log.events(cell=cell)] == [
        e.seq for e in events.log.events() if e.cell == cell
    ]


def test_cache_counts_scope_the_counters_to_a_block_with_the_total_beside():
    """Notebook 02's loop: the block's counts (3 hits of 5, 2 compiled), whatever ran before."""
    import tpu_lab

    torch.ones(3, device="tpu") * 2  # earlier work in the kernel
    before = torch.tpu._get_cache_requests()
    with tpu_lab.cache_counts() as cache, torch.tpu.set_eager_mode(
            torch.tpu.EagerMode.DEFER_AND_FUSE):
        w = torch.randn(64, 64, device="tpu")
        for _ in range(5):
            (torch.randn(8, 64, device="tpu") @ w).relu().mean().item()
    assert (cache.requests, cache.hits, cache.misses) == (5, 3, 2)
    assert cache.total_requests == before + 5
    assert str(cache) == (f"compile cache in this block: 3 hits of 5 lookups (2 compiled); since "
                          f"the kernel started: {cache.total_hits} hits of {before + 5}")
