"""The live dashboard under a flood: a loop emits 1,000 events per second for a few seconds while
a Dashboard is attached. Prints the updates sent per second, the largest batch of events one update
carried, the most events ever kept for the widget and the most rows of its feed (what is sent),
the bytes sent per second, how long an event took to reach the widget, and the loop's slowdown
with vs without the dashboard (interleaved, median of repeats).

Widget messages go through a comm that JSON-encodes them the way a kernel would (no front end
is needed). Run: ``python benchmarks/bench_dashboard.py``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import comm
import torch
from comm.base_comm import BaseComm

import tpu_lab  # noqa: F401
from _record import quick, record
from tpu_lab.events import log
from tpu_lab.views.dashboard import Dashboard


class JsonComm(BaseComm):
    """A comm that encodes every message as a kernel would, and counts them."""

    sent = 0
    nbytes = 0

    def publish_msg(self, msg_type, data=None, metadata=None, buffers=None, **keys) -> None:
        JsonComm.sent += 1
        JsonComm.nbytes += len(json.dumps(data, default=str))


comm.create_comm = JsonComm


def emit(n: int) -> None:
    """``n`` events as the device records them: a host->device copy, a sync, a cache hit."""
    kinds = (
        ("transfer", "cpu->tpu copy of 4.00 KiB", {"direction": "cpu->tpu", "nbytes": 4096}),
        ("sync", "host waited for the device (item)", {"reason": "item"}),
        ("cache_hit", "compile cache hit: graph of 5 ops at item", {"ops": 5, "reason": "item"}),
    )
    for i in range(n):
        kind, summary, details = kinds[i % 3]
        log.record(kind, summary, where="train.py:42", **details)


def paced(rate: int, seconds: float) -> tuple[int, float]:
    """Emit ``rate`` events per second for ``seconds``; returns (events, elapsed)."""
    start = time.perf_counter()
    n = 0
    while (now := time.perf_counter() - start) < seconds:
        due = int(now * rate) + 1
        emit(due - n)
        n = due
        time.sleep(max(0.0, n / rate - (time.perf_counter() - start)))
    return n, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rate", type=int, default=1000, help="events per second")
    parser.add_argument("--seconds", type=float, default=2.0 if quick() else 5.0)
    parser.add_argument("--repeats", type=int, default=3 if quick() else 7)
    parser.add_argument("--quick", action="store_true", help="a shorter flood, fewer repeats")
    parser.add_argument("--events", type=int, default=20_000, help="per slowdown run")
    args = parser.parse_args()

    dash = Dashboard()
    delays = []  # from an event's recording to the first update that carries it
    held = [0]
    drawn = [0]  # the most rows in the synced feed
    last = [dash.events[-1]["seq"] if dash.events else 0]
    batches = []  # the events each update carried
    seen = [dash.seen]

    def measured(change) -> None:
        new = [e for e in dash.events if e["seq"] > last[0]]
        if new:
            delays.append(time.time() - new[0]["time"])
            last[0] = new[-1]["seq"]
            held[0] = max(held[0], len(dash.events))
        drawn[0] = max(drawn[0], sum(len(g["rows"]) for g in dash.feed["groups"]))
        batches.append(dash.seen - seen[0])
        seen[0] = dash.seen

    dash.observe(measured, names="updates")
    first, sent0, bytes0 = dash.updates, JsonComm.sent, JsonComm.nbytes
    start = time.perf_counter()
    n, elapsed = paced(args.rate, args.seconds)
    time.sleep(dash.interval * 2)  # the last batch
    window = time.perf_counter() - start
    updates = dash.updates - first
    print(
        f"{n} events in {elapsed:.2f} s ({n / elapsed:.0f}/s) with the dashboard attached; "
        f"{(JsonComm.nbytes - bytes0) / window / 1024:.0f} KiB/s in "
        f"{(JsonComm.sent - sent0) / window:.1f} comm messages/s"
    )
    bench = "dashboard"
    record(bench, f"updates sent at {args.rate:,} events/s", updates / window, "per s",
           target=1 / dash.interval, note=f"one per {dash.interval * 1e3:.0f} ms")  # fmt: skip
    record(bench, "largest batch of events in one update", max(batches), "events")
    record(bench, "most events kept for the widget", held[0], "events",
           target=dash.max_events + dash.max_notable)  # fmt: skip
    record(bench, "most rows in the synced feed", drawn[0], "rows",
           note="routine events collapse per kind and place")  # fmt: skip
    record(bench, "event to widget, worst", max(delays) * 1e3, "ms",
           note=f"median {statistics.median(delays) * 1e3:.0f} ms")  # fmt: skip
    dash.close()

    x = torch.ones(256, device="tpu")

    def device_loop(n: int) -> None:
        """A loop reading a result back every step: a sync and a transfer event per step."""
        for _ in range(n):
            (x * 2 + 1).sum().item()

    for name, loop, count, target in (
        ("{} events emitted flat out (worst case)", emit, args.events, None),
        ("device loop of {} .item() steps", device_loop, args.events // 4, 1.10),
    ):
        on, off = measure(loop, count, args.repeats)
        record(bench, name.format(f"{count:,}"), statistics.median(on) * 1e3, "ms",
               baseline=statistics.median(off) * 1e3, baseline_label="no dashboard",
               target=target)  # fmt: skip


def measure(loop, count: int, repeats: int) -> tuple[list[float], list[float]]:
    """Interleaved timings of ``loop(count)`` with and without a dashboard attached."""

    def run(attached: bool) -> float:
        board = Dashboard() if attached else None
        start = time.perf_counter()
        loop(count)
        if board is not None:
            board.flush()  # the work left for the worker counts too
        seconds = time.perf_counter() - start
        if board is not None:
            board.close()
        return seconds

    run(True), run(False)
    on, off = [], []
    for _ in range(repeats):
        on.append(run(True))
        off.append(run(False))
    return on, off


if __name__ == "__main__":
    main()
