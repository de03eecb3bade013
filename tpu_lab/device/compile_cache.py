"""TorchTPU's eager compile cache, simulated: graphs in ``DEFER_AND_FUSE``, ops in ``DEFER_NEVER``.

In ``DEFER_AND_FUSE`` TorchTPU records eager ops until a sync point (``.item()``, a copy to the
host, printing, ``synchronize``), compiles the recorded graph and caches it under a key made of
the op order, the shapes and dtypes of the inputs and the Python scalars (which are baked in). A
new key is a compilation; a known one a cache hit. In ``DEFER_NEVER`` (and
``DEFER_NEVER_AND_LAUNCH_BLOCKING``) every op is a graph of its own, compiled once per key and
looked up in the same cache, so ``torch.tpu._get_cache_stats()`` counts every op there.

The bundled device keeps the cache and its statistics exactly that way, but executes every op
at once (it does not defer or fuse, so the mode is not faster here, and the numbers are those
of ``DEFER_NEVER``). What it simulates is *which* sync points would compile and why. The
device's :class:`CompileCache` holds the graphs (with explanations in the event log) and counts
the single ops that kernels written in Python run (the TPU numerics emulation's), without
events; the compiled core counts its own (``core/csrc/opcache.cpp``), and
:meth:`CompileCache.stats` adds them up. A matmul's or convolution's precision
(``torch.tpu.precision``) and ``torch.tpu.allow_excess_precision`` are part of every key, as
they are of TorchTPU's executables. Ops are recorded per thread: each thread's graph ends at its
own sync points.
"""

from __future__ import annotations

import datetime
import threading
import time
from dataclasses import dataclass, field

import torch

from .modes import Precision

_Tensor = torch.Tensor

#: Ops the TPU runs on its MXU (the names the device's kernels see): their precision is part
#: of a compiled graph.
DOT_OPS = frozenset(
    {
        "mm", "bmm", "addmm", "baddbmm", "addbmm", "mv", "addmv", "dot", "vdot", "addr",
        "_addmm_activation", "matmul", "linear", "bilinear", "_trilinear", "einsum",
        "tensordot", "inner", "convolution", "convolution_backward",
        "convolution_overrideable", "convolution_backward_overrideable", "conv1d", "conv2d",
        "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
        "scaled_dot_product_attention", "_scaled_dot_product_attention_math",
        "_scaled_dot_product_flash_attention_for_cpu",
        "_scaled_dot_product_flash_attention_for_cpu_backward",
    }
)  # fmt: skip


@dataclass(frozen=True)
class _AtPrecision:
    """A recorded dot op's precision, as the last part of its signature."""

    precision: Precision


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


_dot: dict[str, bool] = {}  # op name -> whether it is a DOT_OPS op (asked for every op)


def _op_signature(name: str, args: tuple, kwargs: dict, precision: Precision) -> tuple:
    signature = tuple(
        [(a.shape, a.dtype) if isinstance(a, _Tensor) else _signature(a) for a in args]
    )
    if kwargs:
        signature += tuple([(k, _signature(v)) for k, v in kwargs.items()])
    dot = _dot.get(name)
    if dot is None:
        dot = _dot[name] = name.partition(".")[0] in DOT_OPS
    if dot:
        signature += (_AtPrecision(precision),)
    return signature


def _cache_only_miss(what: str) -> RuntimeError:
    return RuntimeError(
        f"Compilation cache miss in cache-only mode ({what}). Call "
        "torch.tpu._set_cache_only(False), or warm up this shape first."
    )


@dataclass
class _Entry:
    ops: tuple
    stats: EntryStats


class CompileCache:
    """The device's eager compile cache: graphs recorded between sync points (per thread), and
    the single ops that kernels written in Python run. ``device`` gives the settings that are
    part of every key (``precision``, ``allow_excess_precision``), ``publish`` and ``core``."""

    def __init__(self, device) -> None:
        self._device = device
        self._lock = threading.Lock()
        self._pending = threading.local()
        self.entries: dict[tuple, _Entry] = {}
        self.requests = 0
        self.hits = 0
        self.cache_only = False
        self.dump_on_miss = False
        self._ops: dict[tuple, list] = {}  # single ops: key -> [reads, last read (time.time())]
        self._op_requests = 0
        self._op_hits = 0

    def _ops_of_thread(self) -> list[tuple]:
        ops = getattr(self._pending, "ops", None)
        if ops is None:
            ops = self._pending.ops = []
        return ops

    def pending(self) -> list[tuple]:
        """This thread's ops recorded since its last sync point: (name, signature) each."""
        return list(self._ops_of_thread())

    def record(self, name: str, args: tuple, kwargs: dict) -> None:
        """DEFER_AND_FUSE: one more op of this thread's pending graph."""
        signature = _op_signature(name, args, kwargs, self._device.precision)
        self._ops_of_thread().append((name, signature))

    def note(self, name: str, args: tuple, kwargs: dict) -> None:
        """An op a kernel written in Python runs: recorded where this thread records, else
        counted as a single-op graph (``DEFER_NEVER``)."""
        if self._device.recording:
            self.record(name, args, kwargs)
        else:
            self._count(name, args, kwargs)

    def flush(self, reason: str) -> None:
        """A sync point: look this thread's recorded graph up in the cache."""
        ops, self._pending.ops = tuple(self._ops_of_thread()), []
        if not ops:
            return
        self._device.core.op_log_mark(0, 0)  # an estimate costs the graph up to here as one
        key = (self._device.allow_excess_precision, ops)
        now = datetime.datetime.now()
        with self._lock:
            self.requests += 1
            entry = self.entries.get(key)
            if entry is not None:
                self.hits += 1
                entry.stats.read_count += 1
                entry.stats.last_read = now
                hit = True
            else:
                if self.cache_only:
                    raise _cache_only_miss(f"a graph of {len(ops)} ops at a sync point: {reason}")
                closest = _closest(key, self.entries)
                # no compiler runs on the bundled device: a compilation takes no time here
                self.entries[key] = _Entry(ops, EntryStats(datetime.timedelta(0), now, 0))
                hit = False
        if hit:
            self._device.publish("cache_hit", ops=len(ops), reason=reason)
            return
        self._device.publish(
            "cache_miss", ops=len(ops), reason=reason, difference=_difference(key, closest),
            graph=[name for name, _ in ops] if self.dump_on_miss else None,
        )  # fmt: skip

    def _count(self, name: str, args: tuple, kwargs: dict) -> None:
        device = self._device
        signature = _op_signature(name, args, kwargs, device.precision)
        key = (device.allow_excess_precision, name, signature)
        now = time.time()
        with self._lock:
            self._op_requests += 1
            entry = self._ops.get(key)
            if entry is not None:
                self._op_hits += 1
                entry[0] += 1
                entry[1] = now
                return
            if self.cache_only:
                raise _cache_only_miss(f"the op aten.{name} with new arguments")
            self._ops[key] = [0, now]

    def stats(self) -> PerfStats:
        """Graphs and single ops together (the core's and the Python kernels'), as TorchTPU's
        one cache counts them."""
        requests, hits, listed = self._device.core.op_cache_stats(True)
        with self._lock:
            requests += self.requests + self._op_requests
            hits += self.hits + self._op_hits
            entries = [e.stats for e in self.entries.values()]
            ops = list(self._ops.values())
        entries += [_entry_stats(reads, last / 1e9) for reads, last in listed]
        entries += [_entry_stats(reads, last) for reads, last in ops]
        return PerfStats(requests, hits, len(entries), None, entries)

    def counts(self) -> tuple[int, int]:
        """Requests and hits, graphs and single ops together (cheaper than :meth:`stats`)."""
        requests, hits, _ = self._device.core.op_cache_stats(False)
        with self._lock:
            return (
                requests + self.requests + self._op_requests,
                hits + self.hits + self._op_hits,
            )

    def clear(self) -> None:
        with self._lock:
            self.entries.clear()
            self._ops.clear()
            self.requests = self.hits = self._op_requests = self._op_hits = 0
        self._pending = threading.local()
        self._device.core.op_cache_clear()
        self._device.publish("cache_cleared")


def _entry_stats(reads: int, last_read: float) -> EntryStats:
    return EntryStats(datetime.timedelta(0), datetime.datetime.fromtimestamp(last_read), reads)


def _closest(key: tuple, entries: dict) -> tuple | None:
    """The cached graph sharing the longest prefix with ``key``'s ops (the newest on ties)."""
    ops, best, best_len = key[1], None, -1
    for cached in entries:
        n = 0
        for a, b in zip(ops, cached[1], strict=False):
            if a != b:
                break
            n += 1
        if n >= best_len:
            best, best_len = cached, n
    return best


def _difference(key: tuple, cached: tuple | None) -> dict:
    """What differs from the closest cached graph, as data for the explanation."""
    ops = key[1]
    if cached is None:
        return {"kind": "first", "text": f"first graph of this kind ({len(ops)} ops)"}
    if cached[1] == ops:
        return {
            "kind": "setting",
            "text": f"the same graph, compiled anew for torch.tpu.allow_excess_precision = "
            f"{key[0]} (cached with {cached[0]})",
        }
    cached = cached[1]
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
        if isinstance(a, _AtPrecision) and isinstance(b, _AtPrecision):
            return {
                "kind": "precision",
                "text": f"op {index} (aten.{name}) at precision {a.precision.name} vs cached "
                f"{b.precision.name} (torch.tpu.precision)",
            }
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
