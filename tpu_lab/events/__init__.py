"""The event log of tpu_lab: compilations, recompilations (explained), sync points, transfers,
out-of-memory errors and mode changes, each with the user's ``file:line`` and IPython cell.

``tpu_lab.events.log`` is the process's log. It records what is published on the event bus
(:mod:`.bus`: the bundled device, the eager modes, the TorchTPU adapter) and what Dynamo
compiles (:mod:`.dynamo`). Recording starts with :func:`install` (``import tpu_lab`` calls
it); ``TPU_LAB_EVENTS=0`` keeps it off.
"""

from __future__ import annotations

import os

from ..runtime.memory import format_bytes
from .bus import BUS
from .context import ipython_cell, user_frame
from .dynamo import STORM, DynamoCollector
from .event_log import KINDS, Event, EventLog
from .explain import Explanation, explain_guard

__all__ = [
    "KINDS",
    "Event",
    "EventLog",
    "Explanation",
    "explain_guard",
    "install",
    "log",
    "reset",
]

#: Environment variable: ``0`` disables recording (read once, at install).
EVENTS_ENV = "TPU_LAB_EVENTS"

log = EventLog()
log.cell = ipython_cell
_dynamo = DynamoCollector(log)


def reset() -> tuple[int, int]:
    """Clear the log and what the collectors remember (recompile counts, compile cost per call
    site, cache misses per sync point). Returns the events cleared and those dropped before."""
    kept = len(log.events())  # reading first collects compilations Dynamo still holds
    dropped = log.dropped
    log.clear()
    _dynamo.reset()
    _misses_at.clear()
    return kept, dropped


def _on_bus(kind: str, data: dict) -> None:
    if kind == "cell_finished":
        log.pull()  # compilations Dynamo recorded lazily are events of the cell that ended
    elif kind == "compile_requested":
        _dynamo.install()
    elif kind == "sync":
        where = user_frame()
        log.record("sync", f"host waited for the device ({data['reason']})", where=where, **data)
    elif kind == "transfer":
        where = user_frame()
        if data["direction"] == "tpu->cpu":  # the host needs the values: a sync point
            log.record(
                "sync",
                "host waited for the device (copy to host)",
                where=where,
                reason="copy to host",
                nbytes=data["nbytes"],
            )
        text = f"{data['direction']} copy of {format_bytes(data['nbytes'])}"
        log.record("transfer", text, where=where, **data)
    elif kind in ("cache_hit", "cache_miss"):
        _record_cache(kind, data)
    elif kind == "cache_cleared":
        _misses_at.clear()
    elif kind == "oom":
        log.record("oom", "out of HBM", where=user_frame(), **data)
    elif kind == "mode_change":
        old, new = data["old"].name, data["new"].name
        summary = f"eager mode {old} -> {new}"
        log.record("mode_change", summary, where=user_frame(), old=old, new=new)


_CACHE_HINTS = {
    "shape": "pad or bucket the changing dimension (e.g. sequence length to a multiple of 64) "
    "so that a few graphs serve every input",
    "scalar": "move the Python number into a tensor (torch.tensor(v, device='tpu')): scalars "
    "are baked into the graph",
    "order": "a different op sequence before the sync point: look for data-dependent Python "
    "control flow or an .item() inside the loop, and move it out",
    "length": "the sync point moved: an .item(), print or .cpu() ends the graph early; keep "
    "them out of the hot loop",
    "dtype": "keep one dtype for the inputs",
    "precision": "keep one torch.tpu.precision for a graph's matmuls: each precision is a graph "
    "of its own",
    "setting": "set torch.tpu.allow_excess_precision once, before the loop: every change "
    "compiles every graph again",
    "first": "warm up the shapes you serve before timing",
    "other": "compare the recorded graphs with torch.tpu._set_dump_on_cache_miss(True)",
}


_misses_at: dict[str | None, int] = {}


def _record_cache(kind: str, data: dict) -> None:
    where = user_frame()
    if kind == "cache_hit":
        summary = f"compile cache hit: graph of {data['ops']} ops at {data['reason']}"
        log.record("cache_hit", summary, where=where, **data)
        return
    difference = data["difference"]
    count = _misses_at[where] = _misses_at.get(where, 0) + 1
    storm = count >= STORM
    summary = f"compile cache miss (compiles): {difference['text']}"
    if storm:
        summary += f" (recompilation storm: {count} compilations at this sync point)"
    log.record(
        "cache_miss",
        summary,
        where=where,
        ops=data["ops"],
        reason=data["reason"],
        changes=[difference["text"]],
        hints=[_CACHE_HINTS[difference["kind"]]],
        recompiles_here=count,
        storm=storm,
        graph=data.get("graph"),
    )


def install() -> None:
    """Start recording (idempotent)."""
    if os.environ.get(EVENTS_ENV, "1") == "0" or _on_bus in BUS.subscribers:
        return
    BUS.subscribe(_on_bus)
    log.pull = _dynamo.flush
