"""The Gradio demo under load: 16 concurrent clients x 5 requests each against
``tpu-lab demo image`` served on 127.0.0.1, eager mode, every request with its own digit and seed.

Checks every answer against the same request run directly (the picture must be identical), that
the queue serves requests one at a time in arrival order, and that the chip's HBM is back to its
baseline afterwards; prints throughput, latency and those figures. Run:
``python benchmarks/bench_demo_load.py`` (``--quick``: 4 clients x 2 requests).
``tests/test_apps_load.py`` runs :func:`load` and asserts its findings.
"""

from __future__ import annotations

import gc
import socket
import statistics
import threading
import time
from dataclasses import dataclass, field

import numpy as np

import tpu_lab  # noqa: F401  (the "tpu" device)

STEPS = 4


@dataclass
class LoadResult:
    clients: int
    requests_each: int
    seconds: float
    latencies: list[float] = field(default_factory=list)
    wrong: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    #: (start, end) host times of each request as the server ran it, in the order it ran them
    served: list[tuple[float, float]] = field(default_factory=list)
    hbm_before: int = 0
    hbm_after: int = 0

    @property
    def answered(self) -> int:
        return len(self.latencies)

    @property
    def overlapping(self) -> int:
        """Requests the server started before the previous one ended (must be 0: queue of 1)."""
        return sum(b[0] < a[1] for a, b in zip(self.served, self.served[1:], strict=False))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def load(clients: int = 16, requests_each: int = 5) -> LoadResult:
    """Serve the demo, hit it from ``clients`` threads, check every answer; stops the server."""
    from gradio_client import Client
    from PIL import Image

    from tpu_lab.apps import image as app
    from tpu_lab.session import EAGER

    blocks = app.launch(port=_free_port(), block=False)
    demo = blocks.demo
    served: list[tuple[float, float]] = []
    real_run = demo.run

    def timed_run(request, on_step=None):
        start = time.perf_counter()
        try:
            return real_run(request, on_step)
        finally:
            served.append((start, time.perf_counter()))

    demo.run = timed_run
    try:
        expected = {}
        for c in range(clients):
            for r in range(requests_each):
                label, seed = (c + r) % 10, 1000 * c + r
                request = app.check_request(label, 1, STEPS, seed, 1, 4, EAGER.value)
                expected[(c, r)] = np.asarray(real_run(request)[0])
        gc.collect()
        before = tpu_lab.backend().memory().live
        result = LoadResult(clients, requests_each, 0.0, hbm_before=before)
        lock = threading.Lock()

        def client(c: int) -> None:
            api = Client(blocks.local_url, verbose=False, download_files=True)
            for r in range(requests_each):
                label, seed = (c + r) % 10, 1000 * c + r
                start = time.perf_counter()
                try:
                    picture, _, _, report = api.predict(
                        label, 1, STEPS, seed, 1, 4, EAGER.value, api_name="/generate"
                    )
                except Exception as exc:  # reported, counted as a failure by the caller
                    with lock:
                        result.errors.append(f"client {c} request {r}: {exc}")
                    continue
                seconds = time.perf_counter() - start
                got = np.asarray(Image.open(picture))
                with lock:
                    result.latencies.append(seconds)
                    if got.shape != expected[(c, r)].shape or not np.array_equal(
                        got, expected[(c, r)]
                    ):
                        result.wrong.append(f"client {c} request {r} (digit {label}, seed {seed})")

        threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
        served.clear()
        start = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        result.seconds = time.perf_counter() - start
        result.served = list(served)
    finally:
        blocks.close()
        demo.close()
    gc.collect()
    result.hbm_after = tpu_lab.backend().memory().live
    return result


def main() -> None:
    from _record import quick, record

    clients, each = (4, 2) if quick() else (16, 5)
    r = load(clients, each)
    total = clients * each
    name = f"demo image, {clients} clients x {each} requests"
    record("demo_load", f"{name}: answered correctly", r.answered - len(r.wrong), "requests",
           target=total, lower_is_better=False, note=f"{len(r.errors)} errors")  # fmt: skip
    record("demo_load", f"{name}: throughput", total / r.seconds, "req/s")
    latencies = sorted(r.latencies)
    record("demo_load", f"{name}: median latency", statistics.median(latencies), "s")
    record("demo_load", f"{name}: p95 latency", latencies[int(0.95 * (len(latencies) - 1))], "s")
    record("demo_load", f"{name}: overlapping requests on the device", r.overlapping, "",
           target=0)  # fmt: skip
    record("demo_load", f"{name}: HBM after - before", r.hbm_after - r.hbm_before, "bytes",
           target=0)  # fmt: skip


if __name__ == "__main__":
    main()
