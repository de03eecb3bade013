"""``EagerMode.DEFER_AND_FUSE`` on the bundled device: TorchTPU's eager compile cache, simulated.

TorchTPU records eager ops until a sync point (``.item()``, a copy to the host, printing,
``synchronize``), compiles the recorded graph and caches it under a key made of the op order,
the shapes and dtypes of the inputs and the Python scalars (which are baked in). A new key is a
compilation; a known one a cache hit.

The bundled device keeps the cache and its statistics exactly that way, but executes every op
at once (it does not defer or fuse, so the mode is not faster here, and the numbers are those
of ``DEFER_NEVER``). What it simulates is *which* sync points would compile and why.
"""

from __future__ import annotations

import datetime
import threading
from dataclasses import dataclass, field

import torch

from . import hooks

_Tensor = torch.Tensor


@dataclass
class EntryStats:
    """One cached graph (TorchTPU's ``CacheEntryStats``)."""

    compilation_duration: datetime.timedelta
    last_read: datetime.datetime
    read_count: int


@dataclass
class PerfStats:
    """TorchTPU's ``_get_cache_stats()`` result."""

    num_cache_reqs: int
    num_cache_hits: int
    num_compilations: int
    peak_compilation_host_memory_bytes: int | None
    per_entry_stats: list[EntryStats] = field(default_factory=list)


def _signature(value):
    """Hashable and cheap: a tensor is (shape, dtype); Python values are kept (baked in)."""
    if isinstance(value, _Tensor):
        return (value.shape, value.dtype)
    if isinstance(value, list):
        return tuple(_signature(v) for v in value)
    return value


def _is_tensor(signature) -> bool:
    return (
        isinstance(signature, tuple)
        and len(signature) == 2
        and isinstance(signature[0], torch.Size)
        and isinstance(signature[1], torch.dtype)
    )


@dataclass
class _Entry:
    ops: tuple
    stats: EntryStats


class CompileCache:
    """The cache of graphs recorded between sync points."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.pending: list[tuple] = []
        self.entries: dict[tuple, _Entry] = {}
        self.requests = 0
        self.hits = 0
        self.cache_only = False
        self.dump_on_miss = False

    def record(self, name: str, args: tuple, kwargs: dict) -> None:
        signature = tuple([_signature(a) for a in args])
        if kwargs:
            signature += tuple([(k, _signature(v)) for k, v in kwargs.items()])
        self.pending.append((name, signature))

    def flush(self, reason: str) -> None:
        """A sync point: look the recorded graph up in the cache."""
        ops, self.pending = tuple(self.pending), []
        if not ops:
            return
        now = datetime.datetime.now()
        with self._lock:
            self.requests += 1
            entry = self.entries.get(ops)
            if entry is not None:
                self.hits += 1
                entry.stats.read_count += 1
                entry.stats.last_read = now
                hooks.emit("cache_hit", ops=len(ops), reason=reason)
                return
            if self.cache_only:
                raise RuntimeError(
                    f"Compilation cache miss in cache-only mode (a graph of {len(ops)} ops at a "
                    f"sync point: {reason}). Call torch.tpu._set_cache_only(False), or warm up "
                    "this shape first."
                )
            closest = _closest(ops, self.entries)
            # no compiler runs on the bundled device: a compilation takes no time here
            self.entries[ops] = _Entry(ops, EntryStats(datetime.timedelta(0), now, 0))
        hooks.emit(
            "cache_miss", ops=len(ops), reason=reason, difference=_difference(ops, closest),
            graph=[name for name, _ in ops] if self.dump_on_miss else None,
        )  # fmt: skip

    def stats(self) -> PerfStats:
        with self._lock:
            return PerfStats(
                self.requests,
                self.hits,
                len(self.entries),
                None,
                [e.stats for e in self.entries.values()],
            )

    def clear(self) -> None:
        with self._lock:
            self.entries.clear()
            self.pending = []
            self.requests = self.hits = 0
        hooks.emit("cache_cleared")


def _closest(ops: tuple, entries: dict) -> tuple | None:
    """The cached graph sharing the longest prefix with ``ops`` (the newest on ties)."""
    best, best_len = None, -1
    for cached in entries:
        n = 0
        for a, b in zip(ops, cached, strict=False):
            if a != b:
                break
            n += 1
        if n >= best_len:
            best, best_len = cached, n
    return best


def _difference(ops: tuple, cached: tuple | None) -> dict:
    """What differs from the closest cached graph, as data for the explanation."""
    if cached is None:
        return {"kind": "first", "text": f"first graph of this kind ({len(ops)} ops)"}
    for index, (new, old) in enumerate(zip(ops, cached, strict=False)):
        if new == old:
            continue
        if new[0] != old[0]:
            return {
                "kind": "order",
                "text": f"op order differs at op {index}: aten.{new[0]} where the cached graph "
                f"has aten.{old[0]}",
            }
        return _argument_difference(index, new, old)
    return {
        "kind": "length",
        "text": f"the graph has {len(ops)} ops where the closest cached graph has {len(cached)}",
    }


def _argument_difference(index: int, new: tuple, old: tuple) -> dict:
    name = new[0]
    for position, (a, b) in enumerate(zip(new[1], old[1], strict=False)):
        if a == b:
            continue
        if _is_tensor(a) and _is_tensor(b):
            if a[0] != b[0]:
                dims = [d for d, (x, y) in enumerate(zip(a[0], b[0], strict=False)) if x != y]
                what = (
                    f"dimension {dims[0]} changed" if dims and len(a[0]) == len(b[0])
                    else "rank changed"
                )  # fmt: skip
                return {
                    "kind": "shape",
                    "text": f"op {index} (aten.{name}) argument {position} shape {list(a[0])} vs "
                    f"cached {list(b[0])}: {what}",
                }
            return {
                "kind": "dtype",
                "text": f"op {index} (aten.{name}) argument {position} dtype "
                f"{str(a[1]).removeprefix('torch.')} vs cached {str(b[1]).removeprefix('torch.')}",
            }
        if _is_size(a) and _is_size(b):
            dims = [d for d, (x, y) in enumerate(zip(a, b, strict=False)) if x != y]
            what = f"dimension {dims[0]} changed" if dims and len(a) == len(b) else "rank changed"
            return {
                "kind": "shape",
                "text": f"op {index} (aten.{name}) size {list(a)} vs cached {list(b)}: {what}",
            }
        return {
            "kind": "scalar",
            "text": f"op {index} (aten.{name}) argument {position}: scalar {a!r} vs cached {b!r} "
            "baked into the graph",
        }
    return {"kind": "other", "text": f"op {index} (aten.{name}) arguments differ"}


def _is_size(value) -> bool:
    return isinstance(value, tuple) and all(isinstance(v, int) for v in value)


CACHE = CompileCache()
