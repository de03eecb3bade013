"""A million events: the log keeps its bound, memory stays flat, and a live dashboard keeps
sending small, batched updates (it stays responsive) instead of one per event."""

from __future__ import annotations

import gc
import itertools
import time
import tracemalloc

import pytest

from tpu_lab.events import EventLog

pytest.importorskip("anywidget")

from tpu_lab.views.dashboard import Dashboard  # noqa: E402

MILLION = 1_000_000


def _flood(log: EventLog, n: int) -> None:
    kinds = ("sync", "transfer", "cache_hit")
    for i in range(n):
        kind = "recompile" if i % 1000 == 0 else kinds[i % 3]
        log.record(kind, f"event {i}", where=f"loop.py:{i % 7}", nbytes=i)


def test_a_million_events_keep_the_log_and_a_live_dashboard_bounded():
    log = EventLog(capacity=10_000)
    dash = Dashboard(log=log, interval=0.05, poll=60.0, max_events=150, max_notable=50)
    seen_at_updates = []
    dash.observe(lambda change: seen_at_updates.append(dash.seen), names="updates")
    try:
        _flood(log, 20_000)  # warm up: the log is full from here on
        dash.flush()
        seen_at_updates[:] = [dash.seen]
        gc.collect()
        tracemalloc.start()
        base, _ = tracemalloc.get_traced_memory()
        start = time.perf_counter()
        _flood(log, MILLION)
        seconds = time.perf_counter() - start
        dash.flush()
        gc.collect()
        now, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    finally:
        dash.close()

    events = log.events()
    assert len(events) == 10_000 and events[-1].seq == 20_000 + MILLION
    assert log.dropped == 20_000 + MILLION - 10_000
    # memory after a million events is what 10,000 events cost, not a million's
    assert now - base < 4 << 20, f"memory grew by {(now - base) / 2**20:.1f} MiB"
    assert peak - base < 64 << 20, f"peak grew by {(peak - base) / 2**20:.1f} MiB"
    state = dash.state()
    assert len(state["events"]) <= 150 + 50
    assert state["seen"] == 20_000 + MILLION
    # batched: at most one update per interval while the flood ran (plus the flushes)
    sent = len(seen_at_updates) - 1
    assert sent <= seconds / 0.05 + 10, (sent, seconds)
    carried = [b - a for a, b in itertools.pairwise(seen_at_updates)]
    assert max(carried) > 1_000  # many events per update, not one message per event
    # the recompiles (one per thousand events) were not pushed out by the flood of syncs
    assert sum(e["kind"] == "recompile" for e in state["events"]) >= 40
