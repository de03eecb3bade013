"""Record what a block did on the device: PyTorch's profiler for the ops, tpu_lab's event log
for sync points, compilations, cache hits/misses and transfers; the result is a :class:`Profile`.

Timings are host time: on the bundled device, the time the CPU spent simulating the chip. There
the block is also estimated on an idealised chip of the simulated generation, from the ops the
device recorded (:mod:`tpu_lab.estimate.recorded`): an estimate, not a measurement.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import time

import torch

from .report import EstimatedSpan, EventSpan, OpSpan, Profile

_LANE_OF = {
    "sync": "sync",
    "compile": "compile",
    "recompile": "compile",
    "cache_hit": "cache",
    "cache_miss": "cache",
    "transfer": "transfer",
    "oom": "sync",
    "mode_change": "sync",
}


@contextlib.contextmanager
def _quiet_kineto():
    """Kineto writes a line to file descriptor 2 as it starts and stops ("USDT: ...
    profiler_start"); keep those out of the notebook, pass anything else on to sys.stderr."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no real file descriptor 2: nothing to hide
        yield
        return
    with tempfile.TemporaryFile(mode="w+b") as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            for line in sink.read().decode(errors="replace").splitlines():
                if line and not line.startswith(("USDT:", "STAGE:")):
                    print(line, file=sys.stderr)


def _inside_an_op(event) -> bool:
    """Whether an ATen op encloses ``event`` (then it is part of that op: the CPU kernel the
    device ran, or a composite op's pieces). Backward and optimizer ops, under autograd's and
    the optimizer's own records, are outermost ops too."""
    parent = event.cpu_parent
    while parent is not None:
        if parent.name.startswith("aten::"):
            return True
        parent = parent.cpu_parent
    return False


class Recorder:
    """``with Recorder("cell") as rec: ...`` then ``rec.profile``; what ``%%tpu profile`` and
    ``torch_tpu._internal.profiler.profile`` run."""

    def __init__(self, label: str = "block") -> None:
        self.label = label
        self.profile: Profile | None = None

    def __enter__(self) -> Recorder:
        from ..events import log
        from ..runtime import backend

        self._simulated = backend().simulated
        if not self._simulated:
            torch.accelerator.synchronize()
        self._seq = log.last_seq()
        self._estimating = backend().recording(title=self.label)
        self._recording = self._estimating.__enter__()
        self._prof = torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True
        )
        with _quiet_kineto():
            self._prof.__enter__()
        self._wall0 = time.time()
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc) -> bool:
        from ..events import log

        if not self._simulated:
            torch.accelerator.synchronize()
        seconds = time.perf_counter() - self._t0
        with _quiet_kineto():
            self._prof.__exit__(*exc)
        self._estimating.__exit__(*exc)
        self.profile = self._build(seconds, log.since(self._seq))
        return False

    def _build(self, seconds: float, events) -> Profile:
        raw = self._prof.events()
        start_ns = self._prof.profiler.kineto_results.trace_start_ns()
        # the profiler's clock starts at start_ns (wall clock, ns); ours at _wall0
        shift_us = (start_ns / 1e3) - self._wall0 * 1e6
        ops = []
        for e in raw:
            if not e.name.startswith("aten::") or _inside_an_op(e):
                continue
            shapes = tuple(tuple(s) for s in (e.input_shapes or ()) if s)
            ops.append(
                OpSpan(e.name, e.time_range.start + shift_us, e.time_range.elapsed_us(), shapes)
            )
        ops.sort(key=lambda o: o.start_us)
        spans = []
        for ev in events:
            lane = _LANE_OF.get(ev.kind)
            if lane is None:
                continue
            at = (ev.time - self._wall0) * 1e6
            dur = float(ev.details.get("compile_seconds", 0.0)) * 1e6
            spans.append(EventSpan(lane, ev.kind, ev.summary, max(at - dur, 0.0), dur, ev.where))
        estimate, estimated = None, ()
        if self._recording is not None:
            estimate = self._recording.estimate()
            estimated = tuple(EstimatedSpan(s.name, s.start * 1e6, s.seconds * 1e6, s.bound)
                              for s in self._recording.timeline())
        return Profile(self.label, seconds * 1e6, tuple(ops), tuple(spans), self._simulated,
                       estimate, estimated)
