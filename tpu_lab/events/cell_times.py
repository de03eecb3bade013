"""Each IPython cell's host time and, on the bundled device, what it ran, while someone asks.

The dashboard asks (:func:`time_cells`); the hooks :func:`tpu_lab.events.context.follow`
registers call :func:`started` and :func:`finished` around every cell. A finished cell's
:class:`CellTime` holds its host time and, on the bundled device, the recording of its ops
(:mod:`tpu_lab.estimate.recorded`): its estimate on an idealised chip is worked out when a view
first asks for it, and the recording is let go then (a long cell records many ops). While
nobody asks, a cell costs one check.
"""

from __future__ import annotations

import collections
import time
from dataclasses import dataclass, field

#: Cells kept, the newest last (the dashboard shows 40 at most).
KEPT = 40


@dataclass
class CellTime:
    """One finished cell: its host time, the recording of what it ran on the bundled device
    (None elsewhere, and once estimated), the event log's newest event when it ended (where it
    sorts among events) and how many cells were timed before it."""

    cell: int | None
    seconds: float
    recording: object | None
    seq: int
    number: int
    _estimate: object | None = field(default=None, repr=False)

    def estimate(self):
        """Its :class:`~tpu_lab.estimate.result.Estimate` on an idealised chip of the simulated
        generation (worked out once; the recording is let go then), or None on a real TPU."""
        if self._estimate is None and self.recording is not None:
            self._estimate, self.recording = self.recording.estimate(), None
        return self._estimate


TIMES: collections.OrderedDict[int | None, CellTime] = collections.OrderedDict()
_asking = [0]
_running: dict[int, tuple] = {}
_timed = [0]


def timed() -> int:
    """How many cells were timed so far (a :class:`CellTime`'s ``number`` is below it)."""
    return _timed[0]


def time_cells(on: bool) -> None:
    """Start (``on``) or stop asking for cell times; each asker stops once."""
    _asking[0] = max(_asking[0] + (1 if on else -1), 0)


def started(shell_id: int, cell: int | None) -> None:
    """A cell starts: time it and record its ops, where someone asks."""
    if not _asking[0]:
        return
    from ..runtime import backend

    block = backend().recording(title=f"In [{cell}]" if cell is not None else "cell")
    recording = block.__enter__()
    _running[shell_id] = (time.perf_counter(), block, recording)


def finished(shell_id: int, cell: int | None) -> None:
    """A cell ends: keep its time (and the recording of its ops)."""
    running = _running.pop(shell_id, None)
    if running is None:
        return
    start, block, recording = running
    seconds = time.perf_counter() - start
    block.__exit__(None, None, None)
    from . import log

    TIMES.pop(cell, None)
    TIMES[cell] = CellTime(cell, seconds, recording, log.last_seq(), _timed[0])
    _timed[0] += 1
    while len(TIMES) > KEPT:
        TIMES.popitem(last=False)
