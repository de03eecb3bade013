"""The interface both runtime adapters implement, and the status record they return."""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

from .._drawn import Drawn
from ..units import MemoryStats


@dataclass(frozen=True)
class DeviceStatus(Drawn):
    """What a user asks first: which backend, which chip, how much HBM is in use."""

    backend: str
    simulated: bool
    device_name: str
    topology: str
    topology_shape: tuple[int, ...]
    chips: int
    devices_in_process: int
    memory: MemoryStats
    eager_mode: str
    #: The index in the topology of the first chip this process drives (``memory`` is its HBM).
    chip_index: int = 0
    #: The hosts the topology spans (a pod slice: several, ``chips // hosts`` chips each).
    hosts: int = 1


class Backend(abc.ABC):
    """One way of running "tpu" tensors: real TorchTPU or the bundled device."""

    name: str
    simulated: bool

    @abc.abstractmethod
    def status(self) -> DeviceStatus:
        """A snapshot of the device this process drives."""

    @abc.abstractmethod
    def memory(self) -> MemoryStats:
        """HBM of ``tpu:0`` in bytes."""

    @abc.abstractmethod
    def use_topology(self, name: str) -> str:
        """Choose the topology (bundled device only); returns its description."""

    def cache_stats(self) -> dict[str, int]:
        """The eager compile cache (DEFER_AND_FUSE's graphs, DEFER_NEVER's single ops):
        TorchTPU's counters on both backends."""
        import torch

        tpu = torch.tpu
        return {
            "requests": tpu._get_cache_requests(),
            "hits": tpu._get_cache_hits(),
            "misses": tpu._get_cache_misses(),
        }

    def recording(self, on=None, title: str = "block"):
        """A context manager that records the ops this thread runs in the block, for an
        estimate of their time on an idealised chip (``on``: a generation, default the
        device's): it yields a :class:`tpu_lab.estimate.recorded.Recording`, filled when the
        block ends, or ``None`` where the backend keeps no such record (a real TPU)."""
        return contextlib.nullcontext(None)

    @abc.abstractmethod
    def set_eager_mode(self, mode) -> None:
        """Switch ``torch.tpu.eager_mode`` to ``mode`` (a ``torch.tpu.EagerMode``); the change is
        published on the event bus (``mode_change``)."""

    @contextlib.contextmanager
    def eager_mode(self, mode) -> Iterator[None]:
        """``mode`` inside the block; the previous mode comes back on exit, also on errors."""
        import torch

        previous = torch.tpu.eager_mode
        self.set_eager_mode(mode)
        try:
            yield
        finally:
            self.set_eager_mode(previous)
