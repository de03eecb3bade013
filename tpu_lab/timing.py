"""Device-aware timing: synchronise before reading the clock; split compile from run time; on
the bundled device, an estimate of the block's time on an idealised TPU chip beside it (from
the ops the device recorded: :mod:`tpu_lab.estimate.recorded`).

- :class:`timed` (``tpu_lab.timed``): a block's host time and, on the bundled device, its
  estimated TPU time;
- :func:`estimating` (``tpu_lab.estimating``): a block's ops recorded, for an estimate alone;
- :class:`cache_counts` (``tpu_lab.cache_counts``): the eager compile cache's counters over a
  block, beside its totals since the kernel started.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from . import events

if TYPE_CHECKING:
    from .estimate.recorded import Recording
    from .estimate.result import Estimate


@dataclass
class Timing:
    """Wall time of a block, and how much of it went to (re)compiling."""

    label: str = "block"
    seconds: float = 0.0
    compile_seconds: float = 0.0
    compilations: int = 0
    sync_points: int = 0
    simulated: bool = True
    #: The device's record of the block's ops (the bundled device only), for :attr:`estimate`.
    recording: Recording | None = field(default=None, repr=False)
    _first_seq: int = field(default=0, repr=False)

    @property
    def run_seconds(self) -> float:
        return max(self.seconds - self.compile_seconds, 0.0)

    @property
    def estimate(self) -> Estimate | None:
        """The block's estimated time on an idealised chip of the simulated generation
        (worked out when first asked for), None on a real TPU."""
        return None if self.recording is None else self.recording.estimate()

    def __str__(self) -> str:
        where = "host time on the simulated device" if self.simulated else "TPU wall time"
        text = (
            f"{self.label}: {self.seconds * 1e3:.1f} ms ({where}); compile "
            f"{self.compile_seconds * 1e3:.1f} ms in {self.compilations} compilation(s), run "
            f"{self.run_seconds * 1e3:.1f} ms; {self.sync_points} sync point(s)"
        )
        if self.recording is not None:
            from .views.estimate import line

            text += f"\n{self.label}: {line(self.estimate)}"
        return text


@dataclass
class CacheCounts:
    """The eager compile cache's lookups, hits and misses (compilations) over a block, and its
    lookups and hits since the kernel started (TorchTPU's counters: ``torch.tpu._get_cache_*``).
    """

    requests: int = 0
    hits: int = 0
    misses: int = 0
    total_requests: int = 0
    total_hits: int = 0

    def __str__(self) -> str:
        return (f"compile cache in this block: {self.hits} hits of {self.requests} lookups "
                f"({self.misses} compiled); since the kernel started: {self.total_hits} hits "
                f"of {self.total_requests}")


class cache_counts:  # noqa: N801 - used like contextlib's context managers
    """``with tpu_lab.cache_counts() as cache: ...`` then ``print(cache)``: what the block
    looked up in the eager compile cache, not what the kernel did before it."""

    def __enter__(self) -> CacheCounts:
        from .runtime import backend

        self._before = backend().cache_stats()
        self.counts = CacheCounts()
        return self.counts

    def __exit__(self, *exc) -> None:
        from .runtime import backend

        after, c = backend().cache_stats(), self.counts
        c.requests, c.hits, c.misses = (after[k] - self._before[k]
                                        for k in ("requests", "hits", "misses"))
        c.total_requests, c.total_hits = after["requests"], after["hits"]


class timed:  # noqa: N801 - used like contextlib's context managers
    """``with tpu_lab.timed("step") as t: ...`` or ``@tpu_lab.timed()``: the device is
    synchronised before the clock is read at both ends, so queued work is counted."""

    def __init__(self, label: str = "block") -> None:
        self.label = label

    def __enter__(self) -> Timing:
        from .runtime import backend

        simulated = backend().simulated
        if not simulated:  # the bundled device never has queued work
            torch.accelerator.synchronize()
        self.timing = Timing(self.label, simulated=simulated)
        self.timing._first_seq = events.log.last_seq()
        self._recording = backend().recording(title=self.label)
        self.timing.recording = self._recording.__enter__()
        self._start = time.perf_counter()
        return self.timing

    def __exit__(self, *exc: object) -> bool:
        t = self.timing
        if not t.simulated:
            torch.accelerator.synchronize()
        t.seconds = time.perf_counter() - self._start
        self._recording.__exit__(*exc)
        inside = events.log.since(t._first_seq)
        compiled = [e for e in inside if e.kind in ("compile", "recompile")]
        t.compilations = len(compiled)
        t.compile_seconds = sum(e.details.get("compile_seconds", 0.0) for e in compiled)
        t.sync_points = sum(e.kind == "sync" for e in inside)
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with timed(self.label if self.label != "block" else fn.__name__) as t:
                result = fn(*args, **kwargs)
            wrapper.last = t
            return result

        wrapper.last = None
        return wrapper


def estimating(on=None, title: str = "block"):
    """``with tpu_lab.estimating() as r: ...`` then ``r.estimate()``: the block's ops as the
    bundled "tpu" device ran them (in this thread, and ``backward()`` on autograd's thread),
    estimated on an idealised chip (``on``: a generation such as ``"v5e"``, default the
    simulated topology's); see :mod:`tpu_lab.estimate.recorded`. On a real TPU there is no such
    record: a clear error says what to use instead."""
    from .errors import TpuLabError
    from .runtime import backend

    active = backend()
    if not active.simulated:
        raise TpuLabError(
            "estimating() records the ops of tpu_lab's simulated 'tpu' device, and this process "
            "runs on a real TPU: time the block there with tpu_lab.timed, or estimate a function "
            "on meta tensors with tpu_lab.estimate.estimate(fn, *meta_args)."
        )
    return active.recording(on, title)
