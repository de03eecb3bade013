"""The simulated chip: which topology, which device this process drives, and its HBM.

Device memory is host memory: every "tpu" storage owns a CPU tensor (its payload) held by a
:class:`Block` attached to the storage's Python object. A block is charged against the chip's
HBM before it is attached and released when the storage dies, so the accounting is exact.
"""

from __future__ import annotations

import collections
import threading

import torch

from ..runtime.memory import MemoryStats, format_bytes
from . import hooks
from .topology import Topology, topology_from_env

#: Attribute of a "tpu" ``UntypedStorage`` that holds its :class:`Block` (kernels.wrap stores
#: it under this literal name on its fast path).
PAYLOAD = "_tpu_lab_block"


class Chip:
    """State of the one chip this process drives (TorchTPU: one chip per process).

    With the Python core the accounting is kept here; with the compiled core (``native``, its
    module) the C++ allocator keeps it and this object reads it and words its errors.
    """

    def __init__(self, topology: Topology, index: int = 0) -> None:
        self.native = None
        self._lock = threading.Lock()
        # Frees are queued without the lock (deque.append is atomic), so that a Block freed by
        # the garbage collector while charge() holds the lock cannot deadlock; the queue is
        # drained under the lock before every read of ``live``.
        self._freed: collections.deque[int] = collections.deque()
        self.topology = topology
        self.capacity = topology.hbm_per_device
        self.index = index
        self.live = 0
        self.peak = 0
        self.allocations = 0
        self.ooms = 0

    @property
    def name(self) -> str:
        return f"{self.topology.generation.display_name} (simulated)"

    def use_native(self, native) -> None:
        """Hand the accounting to the compiled core (before any "tpu" tensor exists)."""
        self.native = native
        native.set_capacity(self.capacity)
        native.set_oom_wording(self._native_oom)

    def _native_oom(self, nbytes: int, live: int, capacity: int) -> str:
        message = self._oom_message(nbytes, live)
        hooks.emit("oom", nbytes=nbytes, message=message)
        return message

    def charge(self, nbytes: int) -> None:
        """Reserve ``nbytes`` of HBM or raise ``torch.OutOfMemoryError`` (nothing reserved)."""
        if self.native is not None:
            self.native.charge(nbytes)
            return
        with self._lock:
            live = (self._drain() if self._freed else self.live) + nbytes
            if live <= self.capacity:
                self.live = live
                self.allocations += 1
                if live > self.peak:
                    self.peak = live
                return
            self.ooms += 1
            message = self._oom_message(nbytes)
        self._raise_oom(nbytes, message)

    def check(self, nbytes: int) -> None:
        """Raise ``torch.OutOfMemoryError`` if ``nbytes`` more would not fit (reserves nothing)."""
        if self.native is not None:
            self.native.check(nbytes)
            return
        with self._lock:
            if self._drain() + nbytes <= self.capacity:
                return
            self.ooms += 1
            message = self._oom_message(nbytes)
        self._raise_oom(nbytes, message)

    @staticmethod
    def _raise_oom(nbytes: int, message: str) -> None:
        # No local holds the exception: a frame referencing it from its own traceback would
        # keep the tensors of every frame alive until the garbage collector runs.
        hooks.emit("oom", nbytes=nbytes, message=message)
        raise torch.OutOfMemoryError(message)

    def release(self, nbytes: int) -> None:
        self._freed.append(nbytes)

    def _drain(self) -> int:
        """Apply queued frees (call with the lock held); returns ``live``."""
        freed = self._freed
        while freed:
            self.live -= freed.popleft()
        return self.live

    def _oom_message(self, nbytes: int, live: int | None = None) -> str:
        live = self.live if live is None else live
        excess = live + nbytes - self.capacity
        return (
            f"RESOURCE_EXHAUSTED: TPU out of memory allocating {format_bytes(nbytes)} on tpu:0 "
            f"({self.name}, {self.topology.name}). Ran out of memory in memory space hbm. "
            f"Used {format_bytes(live)} of {format_bytes(self.capacity)} hbm. Exceeded hbm "
            f"capacity by {format_bytes(excess)}. Free tensors you no longer need (del them), "
            "use a smaller batch or dtype (bfloat16), shard the model over more chips, or "
            f"choose a generation with more HBM (tpu_lab.use_topology('v5p-1'))."
        )

    def stats(self) -> MemoryStats:
        if self.native is not None:
            capacity, live, peak, allocations, ooms = self.native.stats()
            return MemoryStats(capacity, live, peak, allocations, ooms)
        with self._lock:
            return MemoryStats(self.capacity, self._drain(), self.peak, self.allocations, self.ooms)

    def reset_peak(self) -> None:
        if self.native is not None:
            self.native.reset_peak()
            return
        with self._lock:
            self.peak = self._drain()

    def reset_accumulated(self) -> None:
        """Zero the counts of allocations and out-of-memory errors (not the bytes held)."""
        if self.native is not None:
            self.native.reset_accumulated()
            return
        with self._lock:
            self.allocations = self.ooms = 0


class Block:
    """The host memory behind one "tpu" storage: a CPU tensor, charged to the chip.

    ``meta`` caches the payload tensor's ``(size, stride, storage_offset, dtype)`` for the
    kernels; whoever changes that tensor's shape in place sets it back to ``None``.
    """

    __slots__ = ("tensor", "nbytes", "meta")

    def __init__(self, tensor: torch.Tensor, nbytes: int) -> None:
        self.nbytes = 0  # if the charge raises, __del__ releases nothing
        chip = _CHIP
        # Chip.charge's common case, inline (one block per op result; acquire/release in
        # try/finally cost less than a with statement)
        _acquire()
        try:
            live = (chip._drain() if chip._freed else chip.live) + nbytes
            fits = live <= chip.capacity
            if fits:
                chip.live = live
                chip.allocations += 1
                if live > chip.peak:
                    chip.peak = live
        finally:
            _unlock()
        if not fits:
            chip.charge(nbytes)  # raises the out-of-memory error
        self.tensor = tensor
        self.nbytes = nbytes
        self.meta = None

    def __del__(self) -> None:
        _release(self.nbytes)

    def resize(self, tensor: torch.Tensor) -> None:
        """The payload was replaced or grown by an op (``resize_``, ``out=``)."""
        nbytes = tensor.untyped_storage().nbytes()
        if nbytes > self.nbytes:
            _CHIP.charge(nbytes - self.nbytes)
        else:
            _CHIP.release(self.nbytes - nbytes)
        self.tensor = tensor
        self.nbytes = nbytes
        self.meta = None


_CHIP = Chip(topology_from_env())
_release = _CHIP._freed.append  # Chip.release, one call shorter (Block.__del__ is hot)
_acquire, _unlock = _CHIP._lock.acquire, _CHIP._lock.release


def no_such_chip(index: int) -> RuntimeError:
    """The error for ``tpu:N`` with N > 0: a process drives one chip, as on TorchTPU."""
    return RuntimeError(
        f"tpu:{index} does not exist: this process drives one chip, tpu:0 (as with TorchTPU, "
        "each process drives one chip of the topology). Use device='tpu'; for several chips "
        "run one process per chip: %tpu cluster start v6e-4 (tpu_lab.launch.cluster)."
    )


def chip() -> Chip:
    """The chip this process drives."""
    return _CHIP


def set_topology(topology: Topology) -> None:
    """Switch the simulated topology; live tensors keep their bytes on the new chip."""
    with _CHIP._lock:
        _CHIP.topology = topology
        _CHIP.capacity = topology.hbm_per_device
    if _CHIP.native is not None:
        _CHIP.native.set_capacity(topology.hbm_per_device)
