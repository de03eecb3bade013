"""``%tpu status`` with a full event log: 10,000 events (the log's capacity), rendered through a
real IPython InteractiveShell as a notebook would (the view is collected from the backend and the
log, then rendered to text/plain and text/html). Target: at most 50 ms.

Run: ``python benchmarks/bench_magics.py [--quick]``.
"""

from __future__ import annotations

import argparse
import statistics
import time

from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

import tpu_lab
from _record import quick, record
from tpu_lab.events import log
from tpu_lab.views import StatusView

TARGET_MS = 50.0


def fill(n: int) -> None:
    """``n`` events of every kind, with the details real ones carry (reasons, hints, bytes)."""
    log.clear()
    for i in range(n):
        where = f"/tmp/ipykernel_1/{i % 7}.py:{i % 40 + 1}"
        match i % 8:
            case 0:
                log.record(
                    "recompile",
                    f"recompiled step: argument x: dimension 0 changed from {i} to {i + 1}",
                    where=where,
                    reason=f"0/{i}: tensor 'x' size mismatch at index 0. expected {i}",
                    changes=[f"argument x: dimension 0 changed from {i} to {i + 1}"],
                    hints=["pad or bucket this dimension to a few fixed sizes"],
                    compile_seconds=0.01,
                    recompiles_here=i // 8 + 1,
                    storm=i > 32,
                )
            case 1 | 2:
                log.record("cache_hit", "compile cache hit: graph of 12 ops at item", where=where)
            case 3:
                log.record("transfer", "cpu->tpu copy of 4.00 KiB", where=where, nbytes=4096)
            case 4 | 5:
                log.record("sync", "host waited for the device (item)", where=where, reason="item")
            case 6:
                log.record("compile", "compiled step in 0.01 s (12 ops)", where=where)
            case _:
                log.record("cache_miss", "compile cache miss (compiles): scalar 0.5", where=where)


def median_ms(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=7 if quick() else 31)
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    args = parser.parse_args()

    shell = InteractiveShell.instance()
    tpu_lab.load_ipython_extension(shell)
    fill(args.events)
    assert len(log) == min(args.events, log.capacity)

    def magic() -> None:
        with capture_output() as captured:
            shell.run_line_magic("tpu", "status")
        (output,) = captured.outputs
        assert {"text/plain", "text/html"} <= set(output.data)

    magic()  # warm: imports, first rendering
    measured = median_ms(magic, args.repeats)
    record(
        "magics",
        f"%tpu status, {len(log):,} events in the log",
        measured,
        "ms",
        target=TARGET_MS,
        note=f"{measured / TARGET_MS:.2f} of the target; median of {args.repeats}",
    )
    view = StatusView.current()
    parts = {
        "collect (backend status, cache counters, events)": lambda: StatusView.current(),
        "render text/plain": lambda: view.to_text(100),
        "render text/html": view.to_html,
    }
    for name, fn in parts.items():
        print(f"  of which {name}: {median_ms(fn, args.repeats):.2f} ms")


if __name__ == "__main__":
    main()
