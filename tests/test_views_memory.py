"""HBM per chip: text bars at a fixed width, self-contained HTML, a matplotlib figure."""

from __future__ import annotations

import torch

import tpu_lab
from tpu_lab.units import MemoryStats
from tpu_lab.views import ChipMemory, MemoryView
from tpu_lab.views.memory import text_bar

GiB = 1 << 30
CHIP = ChipMemory("tpu:0", MemoryStats(32 * GiB, 8 * GiB, 12 * GiB, 10, 0))


def test_text_bar_shows_live_then_peak_then_free():
    assert text_bar(CHIP.stats, 8) == "██▒░░░░░"
    assert text_bar(MemoryStats(100, 1, 1, 1, 0), 10) == "█░░░░░░░░░"  # a little is not nothing
    assert text_bar(MemoryStats(100, 0, 0, 0, 0), 4) == "░░░░"
    assert text_bar(MemoryStats(100, 100, 100, 1, 0), 4) == "████"


def test_memory_text_at_fixed_width():
    view = MemoryView([CHIP], "HBM per chip (TPU v6e)", note="2 more chips <elsewhere>")
    assert view.to_text(width=80) == (
        "HBM per chip (TPU v6e)\n"
        "  tpu:0  ████▒▒▒░░░░░░░░░░░   25.0%  live 8.00 GiB  peak 12.00 GiB  of 32.00 GiB\n"
        "  █ live  ▒ peak  ░ free\n"
        "  2 more chips <elsewhere>"
    )
    unmeasured = ChipMemory("tpu:0", MemoryStats(16 * GiB, 0, 0, 0, 0, measured=False))
    assert MemoryView([unmeasured]).to_text(width=80) == (
        "HBM per chip\n  tpu:0  16.00 GiB per chip; usage not reported by this backend"
    )


def test_memory_html_at_fixed_width_is_self_contained():
    html = MemoryView([CHIP], "HBM <per> chip", note="a & b").to_html()
    assert html == (
        "<div style='font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:12px'>"
        "<b>HBM &lt;per&gt; chip</b>"
        "<table style='font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:12px;"
        "border-collapse:collapse'><tr><td style='padding:2px 8px;white-space:nowrap'>tpu:0</td>"
        "<td style='padding:2px 8px'><div title='live 8.00 GiB  peak 12.00 GiB  of 32.00 GiB "
        "(25.0% in use)' style='display:flex;width:240px;height:12px;background:#e5e7eb;"
        "border-radius:2px;overflow:hidden'><div style='width:25.00%;background:#2563eb'></div>"
        "<div style='width:12.50%;background:#93c5fd'></div></div></td>"
        "<td style='padding:2px 8px;text-align:right'>25.0%</td>"
        "<td style='padding:2px 8px;color:#374151'>live 8.00 GiB  peak 12.00 GiB  of 32.00 GiB"
        "</td></tr></table><div style='color:#6b7280'>"
        "<span style='display:inline-block;width:10px;height:10px;background:#2563eb;"
        "margin:0 4px 0 8px'></span>live"
        "<span style='display:inline-block;width:10px;height:10px;background:#93c5fd;"
        "margin:0 4px 0 8px'></span>peak"
        "<span style='display:inline-block;width:10px;height:10px;background:#e5e7eb;"
        "margin:0 4px 0 8px'></span>free</div><div style='color:#6b7280'>a &amp; b</div></div>"
    )


def test_memory_figure_and_png():
    fig = MemoryView([CHIP, ChipMemory("tpu:1", MemoryStats(32 * GiB, GiB, GiB, 1, 0))]).figure()
    (ax,) = fig.axes
    assert [t.get_text() for t in ax.get_yticklabels()] == ["tpu:0", "tpu:1"]
    widths = sorted(round(p.get_width(), 2) for p in ax.patches)
    assert widths == [1.0, 1.0, 8.0, 12.0, 32.0, 32.0]  # live, peak, capacity in GiB
    assert MemoryView([CHIP]).png().startswith(b"\x89PNG\r\n\x1a\n")


def test_memory_of_this_process_follows_allocations():
    tpu_lab.use_topology("v6e-4")
    try:
        before = MemoryView.current().chips[0].stats.live
        x = torch.empty(1 << 20, dtype=torch.uint8, device="tpu")
        view = MemoryView.current()
        assert view.chips[0].stats.live == before + x.nbytes
        assert view.chips[0].label == "tpu:0 (chip 0)"
        assert view.note == (
            "this process drives chip 0 of the 4 chips of v6e-4; the other 3 belong to other "
            "processes, one chip each (%tpu cluster)"
        )
        del x
    finally:
        tpu_lab.use_topology("v6e-1")
    assert MemoryView.current().note is None


def test_the_chip_of_this_process_is_the_one_its_backend_names(monkeypatch):
    import dataclasses

    from tpu_lab.runtime import backend

    active = backend()
    status = dataclasses.replace(active.status(), chips=4, topology="v6e-4", chip_index=2)
    monkeypatch.setattr(active, "status", lambda: status)
    view = MemoryView.current()
    assert view.chips[0].label == "tpu:0 (chip 2)"
    assert view.note.startswith("this process drives chip 2 of the 4 chips of v6e-4")
