"""Device-aware timing: synchronise before reading the clock; split compile from run time."""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field

import torch

from . import events


@dataclass
class Timing:
    """Wall time of a block, and how much of it went to (re)compiling."""

    label: str = "block"
    seconds: float = 0.0
    compile_seconds: float = 0.0
    compilations: int = 0
    sync_points: int = 0
    simulated: bool = True
    _first_seq: int = field(default=0, repr=False)

    @property
    def run_seconds(self) -> float:
        return max(self.seconds - self.compile_seconds, 0.0)

    def __str__(self) -> str:
        where = "host time on the simulated device" if self.simulated else "TPU wall time"
        return (
            f"{self.label}: {self.seconds * 1e3:.1f} ms ({where}); compile "
            f"{self.compile_seconds * 1e3:.1f} ms in {self.compilations} compilation(s), run "
            f"{self.run_seconds * 1e3:.1f} ms; {self.sync_points} sync point(s)"
        )


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
        self._start = time.perf_counter()
        return self.timing

    def __exit__(self, *exc: object) -> bool:
        t = self.timing
        if not t.simulated:
            torch.accelerator.synchronize()
        t.seconds = time.perf_counter() - self._start
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
