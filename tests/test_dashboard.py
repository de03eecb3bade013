"""The live dashboard's Python side: its state after events, the eager/compiled toggle, bounded and
batched updates, the update after every IPython cell, and the static fallback."""

from __future__ import annotations

import re
import textwrap
import time

import pytest
import torch

import tpu_lab
from tpu_lab import events
from tpu_lab.events import EventLog
from tpu_lab.events.event_log import Pending
from tpu_lab.session import cache_note
from tpu_lab.views._dashboard_view import DashboardView

pytest.importorskip("anywidget", reason="the dashboard needs the [lab] extra")
from tpu_lab.views.dashboard import Dashboard, widget_file  # noqa: E402

RECOMPILE = {
    "reason": "0/0: tensor 'x' size mismatch at index 0. expected 4, actual 8",
    "function": "f (cell.py:1)",
    "changes": ["argument x: dimension 0 changed from 4 to 8"],
    "hints": ["pad or bucket this dimension"],
    "compile_seconds": 0.5,
    "site_compile_seconds": 1.0,
    "recompiles_here": 1,
}


@pytest.fixture
def log():
    return EventLog(capacity=100_000)


@pytest.fixture
def dashboards():
    made = []

    def make(**kwargs):
        made.append(Dashboard(**kwargs))
        return made[-1]

    yield make
    for dashboard in made:
        dashboard.close()


@pytest.fixture
def restore_mode():
    before = torch.tpu.eager_mode
    yield
    torch.tpu.eager_mode = before


def wait_for(condition, timeout=10.0):
    """Poll until ``condition()`` holds (the worker thread updates on its own)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_state_after_events_groups_cells_and_explains_recompiles(log, dashboards):
    log.cell = lambda: 3
    log.record("compile", "compiled f in 0.50 s (2 ops)", where="/tmp/ipykernel_1/2.py:4")
    log.record("recompile", "recompiled f: argument x: dimension 0 changed from 4 to 8",
               where="/tmp/ipykernel_1/2.py:5", **RECOMPILE)  # fmt: skip
    dash = dashboards(log=log, poll=60)  # history: recorded before the dashboard opened
    log.cell = lambda: 4
    for _ in range(3):
        log.record("sync", "host waited for the device (item)", where="/home/me/a.py:9")
    dash.flush()
    assert [(e["seq"], e["kind"], e["cell"]) for e in dash.events] == [
        (1, "compile", 3), (2, "recompile", 3), (3, "sync", 4), (4, "sync", 4), (5, "sync", 4),
    ]  # fmt: skip
    assert dash.events[1]["where"] == "2.py:5"
    assert "argument x: dimension 0 changed from 4 to 8" in dash.events[1]["explanation"]
    assert "pad or bucket this dimension" in dash.events[1]["explanation"]
    assert dash.events[0]["explanation"] == ""
    assert dash.cells == [
        {"cell": 3, "total": 2, "counts": {"compile": 1, "recompile": 1}},
        {"cell": 4, "total": 3, "counts": {"sync": 3}},
    ]
    assert dash.seen == 5
    assert dash.cache["compiles"] == 1 and dash.cache["recompiles"] == 1
    assert set(dash.cache) == {"requests", "hits", "misses", "compiles", "recompiles"}


def test_device_state_shows_the_topology_and_the_chip_this_process_drives(log, dashboards):
    tpu_lab.use_topology("v6e-4")
    try:
        x = torch.ones(1024, device="tpu")
        dash = dashboards(log=log, poll=60)
        assert dash.device["topology"] == "v6e-4"
        assert dash.device["topology_shape"] == [2, 2, 1]
        assert [c["driven"] for c in dash.chips] == [True, False, False, False]
        assert dash.chips[0]["live"] >= x.nbytes and dash.chips[0]["capacity"] == 32 << 30
        assert dash.chips[1]["live"] == 0 and dash.chips[1]["capacity"] == 32 << 30
        del x
    finally:
        tpu_lab.use_topology("v6e-1")


def test_the_toggle_switches_torch_tpu_eager_mode(log, dashboards, restore_mode):
    torch.tpu.eager_mode = torch.tpu.EagerMode.DEFER_NEVER
    dash = dashboards(log=log, poll=60)
    assert dash.eager_mode == "DEFER_NEVER"
    dash.set_state({"eager_mode": "DEFER_AND_FUSE"})  # what a click in the front end sends
    assert torch.tpu.eager_mode is torch.tpu.EagerMode.DEFER_AND_FUSE
    assert dash.error == ""
    dash.set_state({"eager_mode": "DEFER_NEVER"})
    assert torch.tpu.eager_mode is torch.tpu.EagerMode.DEFER_NEVER


def test_mode_changes_elsewhere_reach_the_widget_without_a_flush(dashboards, restore_mode):
    torch.tpu.eager_mode = torch.tpu.EagerMode.DEFER_NEVER
    dash = dashboards(interval=0.02, poll=60)  # the process's log records the mode changes
    with torch.tpu.set_eager_mode(torch.tpu.EagerMode.DEFER_NEVER_AND_LAUNCH_BLOCKING):
        assert wait_for(lambda: dash.eager_mode == "DEFER_NEVER_AND_LAUNCH_BLOCKING")
    assert wait_for(lambda: dash.eager_mode == "DEFER_NEVER")


@pytest.mark.parametrize("wanted", ["BOGUS", "_INTERNAL_COMPILE_FX_GRAPH"])
def test_an_unknown_mode_is_refused_and_the_toggle_reverts(log, dashboards, restore_mode, wanted):
    torch.tpu.eager_mode = torch.tpu.EagerMode.DEFER_NEVER
    dash = dashboards(log=log, poll=60)
    dash.set_state({"eager_mode": wanted})
    assert torch.tpu.eager_mode is torch.tpu.EagerMode.DEFER_NEVER
    assert dash.eager_mode == "DEFER_NEVER"
    assert dash.error == (
        f"Unknown eager mode {wanted!r}; use one of eager, fuse, blocking, or a "
        "torch.tpu.EagerMode name: DEFER_NEVER, DEFER_AND_FUSE, DEFER_NEVER_AND_LAUNCH_BLOCKING."
    )


def test_events_reach_the_widget_without_a_flush(log, dashboards):
    dash = dashboards(log=log, interval=0.02, poll=60)
    log.record("transfer", "cpu->tpu copy of 4 B", direction="cpu->tpu", nbytes=4)
    assert wait_for(lambda: dash.seen == 1)
    assert dash.events[-1]["summary"] == "cpu->tpu copy of 4 B"


def updates_of(dash) -> list[int]:
    """The events each update of ``dash`` carried, from now on."""
    seen = [dash.seen]
    carried = []

    def sent(change) -> None:
        carried.append(dash.seen - seen[0])
        seen[0] = dash.seen

    dash.observe(sent, names="updates")
    return carried


def test_a_flood_is_batched_and_bounded_and_keeps_the_recompile(log, dashboards):
    interval = 0.05
    dash = dashboards(log=log, interval=interval, poll=60, max_events=20, max_notable=5)
    carried = updates_of(dash)
    log.record("recompile", "recompiled f: argument x: dimension 0 changed from 4 to 8",
               **RECOMPILE)  # fmt: skip
    start = time.monotonic()
    n = 0
    while time.monotonic() - start < 0.5 or n < 5000:
        log.record("cache_hit", "compile cache hit: graph of 3 ops at item", ops=3, reason="item")
        n += 1
    elapsed = time.monotonic() - start
    dash.flush()
    assert len(carried) <= elapsed / interval + 3  # coalesced: at most one update per interval
    assert max(carried) > 1
    assert len(dash.events) == 21  # the 20 newest plus the recompile they pushed out
    assert dash.events[0]["kind"] == "recompile"
    assert dash.seen == n + 1
    assert dash.cells == [
        {"cell": None, "total": n + 1, "counts": {"recompile": 1, "cache_hit": n}}
    ]


class LateSource:
    """Like Dynamo's collector: compilations finished earlier, handed to the log when it reads."""

    def __init__(self) -> None:
        self.pending = []

    def collect(self):
        done = [Pending("compile", text, None, {}, time.time()) for text in self.pending]
        self.pending.clear()
        return done


def test_after_each_ipython_cell_lazily_recorded_compilations_are_shown(dashboards):
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    events.reset()
    source = LateSource()
    remove = events.log.add_source(source)
    try:
        dash = dashboards(poll=60, interval=60)  # the process's log: the cell's end reaches it
        shell.user_ns["pending"] = source.pending
        shell.run_cell("pending.append('compiled f in 0.10 s (1 ops)')")
        assert [e["summary"] for e in dash.events] == ["compiled f in 0.10 s (1 ops)"]
        dash.close()
        shell.run_cell("pending.append('compiled g in 0.10 s (1 ops)')")
        assert len(dash.events) == 1  # closed: unhooked
    finally:
        remove()


def test_close_stops_updates(log, dashboards, restore_mode):
    dash = dashboards(log=log, interval=0.01, poll=0.01)
    dash.close()
    assert not dash._worker.is_alive()
    updates = dash.updates
    log.record("sync", "host waited for the device (item)")
    torch.tpu.eager_mode = torch.tpu.EagerMode.DEFER_AND_FUSE
    time.sleep(0.05)
    assert dash.updates == updates and dash.seen == 0


def test_bad_settings_are_refused(log):
    with pytest.raises(ValueError, match="interval and poll must be positive seconds, got 0"):
        Dashboard(log=log, interval=0)
    with pytest.raises(ValueError, match="max_events and max_cells must be at least 1"):
        Dashboard(log=log, max_events=0)


def test_the_front_end_is_loaded_from_the_widgets_folder():
    js, css = widget_file("dashboard.js"), widget_file("dashboard.css")
    assert js.parent.name in ("widgets", "_widgets")
    assert str(Dashboard._esm) == js.read_text() and "export default { render }" in js.read_text()
    assert str(Dashboard._css) == css.read_text()
    with pytest.raises(FileNotFoundError, match="reinstall tpu-lab"):
        widget_file("missing.js")


def test_fallback_bundle_has_the_widget_and_static_html_and_text(log, dashboards):
    log.record("recompile", "recompiled f: <x> changed", **RECOMPILE)
    dash = dashboards(log=log, poll=60)
    data, _ = dash._repr_mimebundle_()
    assert data["application/vnd.jupyter.widget-view+json"]["model_id"] == dash.model_id
    assert "recompiled f: &lt;x&gt; changed" in data["text/html"]
    assert "<x>" not in data["text/html"] and "why?" in data["text/html"]
    assert data["text/plain"].startswith("tpu_lab dashboard · ")
    assert "recompiled f: <x> changed" in data["text/plain"]


STATE = {
    "device": {"backend": "tpu_lab bundled device", "simulated": True,
               "device_name": "TPU v6e (simulated)", "topology": "v6e-4",
               "topology_shape": [2, 2, 1], "chips": 4, "devices_in_process": 1},
    "chips": [{"index": 0, "driven": True, "capacity": 32 << 30, "live": 8 << 30,
               "peak": 12 << 30, "measured": True},
              {"index": 1, "driven": False, "capacity": 32 << 30, "live": 0, "peak": 0,
               "measured": False}],
    "cache": {"requests": 4, "hits": 3, "misses": 1, "compiles": 1, "recompiles": 2},
    "events": [{"seq": 7, "kind": "recompile", "summary": "recompiled f: x changed", "cell": 5,
                "where": "2.py:5", "time": 0.0, "explanation": "<b>why</b>"},
               {"seq": 9, "kind": "sync", "summary": "host waited", "cell": 6, "where": "",
                "time": 0.0, "explanation": ""}],
    "cells": [{"cell": 5, "total": 40, "counts": {"recompile": 2, "sync": 38}},
              {"cell": 6, "total": 1, "counts": {"sync": 1}}],
    "times": [],
    "seen": 41, "modes": [], "eager_mode": "DEFER_AND_FUSE", "error": "", "updates": 3,
}  # fmt: skip


def test_static_text_at_a_fixed_width():
    assert DashboardView(STATE).to_text(width=90) == (
        "tpu_lab dashboard · TPU v6e (simulated) · v6e-4 (2,2,1), 4 chips; this process drives 1\n"
        "  eager mode     DEFER_AND_FUSE\n"
        "  compile cache  hit rate 75% (3 of 4 lookups since the kernel started)\n"
        "                 DEFER_AND_FUSE: the ops between two sync points are one graph, looked up\n"
        "                 in the eager compile cache by its ops, shapes, dtypes and Python scalars:\n"
        "                 a hit reuses the compiled graph, a miss compiles it. Each program launch\n"
        "                 costs time: the estimates count 10 µs per eager op and 20 µs per compiled\n"
        "                 graph.\n"
        "  torch.compile  1 compile, 2 recompiles\n"
        "  HBM chip 0     ██░░░░░░░░ 8.00 GiB / 32.00 GiB, peak 12.00 GiB\n"
        "  HBM chip 1     32.00 GiB, driven by another process\n"
        "  events (2 shown of 41)\n"
        "  In [6] · 1 event\n"
        "        9 sync        host waited\n"
        "  In [5] · 40 events\n"
        "        7 recompile   recompiled f: x changed  2.py:5"
    )


def test_static_html_has_gauges_and_explanations():
    html = DashboardView(STATE).to_html()
    assert "width:25.0%" in html and "left:37.5%" in html  # live and peak of chip 0
    assert "driven by another process" in html
    assert html.index("In [6]") < html.index("In [5]")  # newest cell first
    assert "<details><summary style='cursor:pointer;color:#6b7280'>why?</summary><b>why</b>" in html
    assert "hit rate <b>75% (3 of 4 lookups since the kernel started)</b>" in html


def test_closing_freezes_the_displayed_output_into_static_html(log, dashboards, monkeypatch):
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.display import display

    shell = InteractiveShell.instance()
    published = []
    monkeypatch.setattr(
        shell.display_pub, "publish", lambda data, **kw: published.append((data, kw))
    )
    dash = dashboards(log=log, poll=60)
    display(dash)
    ((live, first),) = published
    assert "application/vnd.jupyter.widget-view+json" in live and not first.get("update")
    assert "text/html" in live and "(none yet)" in live["text/html"]
    log.record("recompile", "recompiled f: argument x changed", **RECOMPILE)
    dash.close()
    frozen, second = published[1]
    assert second["update"] and second["transient"] == first["transient"]
    assert set(frozen) == {"text/plain", "text/html"}  # no widget left to render
    assert "recompiled f: argument x changed" in frozen["text/html"]


def test_static_html_draws_no_gauge_for_chips_of_other_processes():
    other = {**STATE, "chips": STATE["chips"][1:]}
    html = DashboardView(other).to_html()
    assert "background:#2563eb" not in html and "background:#dc2626" not in html
    assert "32.00 GiB, driven by another process" in html


def test_the_feed_collapses_routine_events_per_kind_and_place():
    from tpu_lab.views._dashboard_rows import collapse

    def event(seq, kind, summary, where="In[3]:2"):
        return {"seq": seq, "kind": kind, "summary": summary, "where": where}

    events = [
        event(1, "transfer", "cpu->tpu copy of 128 B"),
        event(2, "sync", "host waited for the device (item)"),
        event(3, "transfer", "cpu->tpu copy of 4.00 KiB"),
        event(4, "recompile", "recompiled f: argument x: dimension 0 changed from 3 to 4"),
        event(5, "sync", "host waited for the device (item)"),
        event(6, "sync", "host waited for the device (item)", where="In[3]:5"),
    ]
    assert [(e["seq"], n, s) for e, n, s in collapse(events)] == [
        (1, 2, "2 transfer events, first: cpu->tpu copy of 128 B"),
        (2, 2, "host waited for the device (item)"),
        (4, 1, "recompiled f: argument x: dimension 0 changed from 3 to 4"),
        (6, 1, "host waited for the device (item)"),
    ]


def test_the_toggle_offers_the_session_modes_of_the_session(log, dashboards):
    dash = dashboards(log=log, poll=60)
    assert [(m["value"], m["label"]) for m in dash.modes] == [
        ("DEFER_NEVER", "Eager"),
        ("DEFER_AND_FUSE", "DEFER_AND_FUSE"),  # TorchTPU's name; "compiled" is torch.compile
        ("DEFER_NEVER_AND_LAUNCH_BLOCKING", "Blocking"),
    ]


def test_the_driven_chip_is_the_one_the_backend_names(log, dashboards, monkeypatch):
    import dataclasses

    from tpu_lab.runtime import backend

    active = backend()
    status = dataclasses.replace(
        active.status(), chips=4, topology="v6e-4", topology_shape=(2, 2, 1), chip_index=2
    )
    monkeypatch.setattr(active, "status", lambda: status)
    dash = dashboards(log=log, poll=60)
    assert [c["driven"] for c in dash.chips] == [False, False, True, False]
    assert dash.chips[2]["live"] == status.memory.live and dash.chips[0]["live"] == 0


def test_the_rows_of_a_state_are_computed_once_for_every_drawing():
    from tpu_lab.views._dashboard_rows import rows

    drawn = rows(STATE)
    assert drawn["header"] == {
        "title": "TPU v6e (simulated)",
        "subtitle": "v6e-4 (2,2,1), 4 chips; this process drives 1",
        "backend": "tpu_lab bundled device",
    }
    assert drawn["counters"] == {
        "rate": "75%", "fill": 75.0,
        "hit_rate": "75% (3 of 4 lookups since the kernel started)",
        "detail": "hit rate · 3 hits, 1 misses of 4 lookups since the kernel started",
        "compiles": "1 compile", "recompiles": "2 recompiles", "warn": True,
        "note": cache_note("DEFER_AND_FUSE"),
    }  # fmt: skip
    assert drawn["gauges"] == {
        "columns": 2,
        "chips": [
            {"name": "chip 0", "tag": "this process", "driven": True, "meter": True,
             "live": 25.0, "peak": 37.5, "usage": "8.00 GiB / 32.00 GiB, peak 12.00 GiB",
             "lines": ["8.00 GiB of 32.00 GiB", "peak 12.00 GiB"]},
            {"name": "chip 1", "tag": "other process", "driven": False, "meter": False,
             "live": 0.0, "peak": 0.0, "usage": "32.00 GiB, driven by another process",
             "lines": ["32.00 GiB · driven by another process"]},
        ],
    }  # fmt: skip
    feed = drawn["feed"]
    assert feed["shown"] == "2 shown of 41"
    assert [(g["title"], g["total"], g["open"]) for g in feed["groups"]] == [
        ("In [6]", "1 event", True),  # the newest cell
        ("In [5]", "40 events", True),  # a recompile: notable
    ]
    assert feed["groups"][1]["badges"] == [
        {"kind": "recompile", "text": "2 recompiles"}, {"kind": "sync", "text": "38 syncs"},
    ]  # fmt: skip
    (recompile,) = feed["groups"][1]["rows"]
    assert (recompile["label"], recompile["alert"], recompile["why_open"]) == (
        "recompile", True, True,
    )  # fmt: skip
    assert DashboardView(STATE).rows == drawn


def test_the_widget_is_sent_the_rows_and_the_palette(log, dashboards):
    from tpu_lab.views._widget_protocol import PALETTE
    from tpu_lab.views.palette import KIND_COLORS, KIND_COLORS_DARK

    log.cell = lambda: 2
    for nbytes in (128, 128, 4096):
        log.record("transfer", f"cpu->tpu copy of {nbytes} B", where="a.py:3",
                   direction="cpu->tpu", nbytes=nbytes)  # fmt: skip
    for _ in range(3):
        log.record("cache_hit", "compile cache hit: graph of 3 ops at item", where="a.py:4")
    dash = dashboards(log=log, poll=60)
    view = dash.view()
    assert {name: getattr(dash, name) for name in view.rows} == view.rows
    ((group),) = dash.feed["groups"]
    assert [(r["label"], r["summary"], r["times"]) for r in group["rows"]] == [
        ("transfer", "3 transfer events, first: cpu->tpu copy of 128 B", ""),
        ("cache hit", "compile cache hit: graph of 3 ops at item", "×3"),
    ]
    assert [b["text"] for b in group["badges"]] == ["3 transfers", "3 cache hits"]
    assert dash.palette == PALETTE
    assert set(KIND_COLORS) == set(KIND_COLORS_DARK) == set(tpu_lab.events.KINDS)


def test_each_cell_shows_its_host_time_and_its_estimated_tpu_time(dashboards):
    from IPython.core.interactiveshell import InteractiveShell

    from tpu_lab.events import cell_times

    shell = InteractiveShell.instance()
    shell.user_ns["torch"] = torch
    shell.run_cell("x = torch.ones(256, 256, device='tpu')")  # no dashboard: not timed
    before = cell_times.timed()
    dash = dashboards(poll=60, interval=60)
    tpu_lab.use_topology("v5e-4")
    try:
        shell.run_cell("y = x @ x", store_history=True)
        number = shell.execution_count - 1
    finally:
        tpu_lab.use_topology("v6e-1")
    assert cell_times.timed() == before + 1
    (group,) = [g for g in dash.feed["groups"] if g["title"] == f"In [{number}]"]
    host, estimated = group["timing"].split(" · ")
    assert re.fullmatch(r"host [0-9.]+ (µs|ms|s) \(simulated device\)", host)
    assert estimated.startswith("estimated on an idealised TPU v5e chip (not a measurement): ")
    assert "top: aten.mm 100%" in estimated
    timed = next(t for t in cell_times.TIMES.values() if t.cell == number)
    assert timed.recording is None and timed.estimate().chip.name == "v5e"  # drawn: let go
    lines = dash.view().to_text(width=200).splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith(f"  In [{number}] · "))
    timing = textwrap.wrap(group["timing"], 200, initial_indent="    ",
                           subsequent_indent="    ", break_long_words=False)  # between words
    assert lines[head + 1:head + 1 + len(timing)] == timing
    assert f"{group['timing']}</div>" in dash.view().to_html()
    dash.close()
    shell.run_cell("y = x @ x")
    assert cell_times.timed() == before + 1  # closed: nobody asks


def test_the_cache_is_explained_beside_its_counters_and_no_line_is_cut_mid_figure():
    """In DEFER_NEVER a high hit rate with nothing of the user's compiled: the dashboard says
    why (every eager op is a cached program) and what launches cost; long lines wrap."""
    state = {**STATE, "eager_mode": "DEFER_NEVER", "times": [
        {"cell": 6, "host": 10.4, "estimate": "estimated on an idealised TPU v6e chip (not a "
                                              "measurement): 47.3 ms (launch-bound)"}]}
    text = DashboardView(state).to_text(width=72)
    assert ("DEFER_NEVER: each op runs as its own small compiled program, looked up in the "
            "eager compile cache by op, shapes and dtypes") in " ".join(text.split())
    assert "10 µs per eager op and 20 µs per compiled graph" in " ".join(text.split())
    assert "…" not in text and all(len(line) <= 72 for line in text.splitlines())
    assert "47.3 ms (launch-bound)" in " ".join(text.split())
    assert "each op runs as its own small compiled program" in DashboardView(state).to_html()
