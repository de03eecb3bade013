"""What the event bus carries, recorded as events of a log: the one subscriber of the bus.

The bundled device publishes sync points, transfers, compile-cache hits and misses, out-of-memory
errors and the first ``torch.compile``; the eager modes and the TorchTPU adapter publish mode
changes; the IPython cell follower publishes the end of each cell (:mod:`.bus`). Each becomes an
event with the user's ``file:line`` (a copy to the host is also a sync point; a cache miss is
explained and counted per sync point), ``compile_requested`` starts the Dynamo collector, and
the end of a cell reaches the log's subscribers (:meth:`.EventLog.end_cell`).
"""

from __future__ import annotations

from typing import Any

from ..units import format_bytes
from .context import user_frame
from .dynamo import STORM, DynamoCollector
from .event_log import EventLog

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


class DeviceCollector:
    """Records into ``log`` what the bus carries; ``dynamo`` is started by the first
    ``torch.compile`` of a "tpu" function."""

    def __init__(self, log: EventLog, dynamo: DynamoCollector) -> None:
        self.log = log
        self.dynamo = dynamo
        self._misses_at: dict[str | None, int] = {}  # cache misses per sync point
        self._records = {
            "sync": self._sync,
            "transfer": self._transfer,
            "cache_hit": self._cache_hit,
            "cache_miss": self._cache_miss,
            "oom": self._oom,
            "mode_change": self._mode_change,
        }

    def reset(self) -> None:
        """Forget the cache misses counted per sync point."""
        self._misses_at.clear()

    def on_bus(self, kind: str, data: dict[str, Any]) -> None:
        """The bus subscriber (:class:`.bus.Bus`)."""
        if kind == "cell_finished":
            self.log.end_cell()
        elif kind == "compile_requested":
            self.dynamo.install()
        elif kind == "cache_cleared":
            self._misses_at.clear()
        elif self.log.enabled:  # off: not even the user's frame is looked for
            record = self._records.get(kind)
            if record is not None:
                record(data, user_frame())

    def _sync(self, data: dict[str, Any], where: str | None) -> None:
        summary = f"host waited for the device ({data['reason']})"
        self.log.record("sync", summary, where=where, **data)

    def _transfer(self, data: dict[str, Any], where: str | None) -> None:
        if data["direction"] == "tpu->cpu":  # the host needs the values: a sync point
            self.log.record(
                "sync",
                "host waited for the device (copy to host)",
                where=where,
                reason="copy to host",
                nbytes=data["nbytes"],
            )
        text = f"{data['direction']} copy of {format_bytes(data['nbytes'])}"
        self.log.record("transfer", text, where=where, **data)

    def _oom(self, data: dict[str, Any], where: str | None) -> None:
        self.log.record("oom", "out of HBM", where=where, **data)

    def _mode_change(self, data: dict[str, Any], where: str | None) -> None:
        old, new = data["old"].name, data["new"].name
        self.log.record("mode_change", f"eager mode {old} -> {new}", where=where, old=old, new=new)

    def _cache_hit(self, data: dict[str, Any], where: str | None) -> None:
        summary = f"compile cache hit: graph of {data['ops']} ops at {data['reason']}"
        self.log.record("cache_hit", summary, where=where, **data)

    def _cache_miss(self, data: dict[str, Any], where: str | None) -> None:
        difference = data["difference"]
        count = self._misses_at[where] = self._misses_at.get(where, 0) + 1
        storm = count >= STORM
        summary = f"compile cache miss (compiles): {difference['text']}"
        if storm:
            summary += f" (recompilation storm: {count} compilations at this sync point)"
        self.log.record(
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
