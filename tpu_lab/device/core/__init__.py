"""The compiled core of the bundled device, and the one interface the rest of the device uses.

The core (``csrc/``, C++) is a real PyTorch backend organised like PyTorch's reference
out-of-tree backend, OpenReg: an allocator whose host memory stands in for HBM, the PrivateUse1
hooks (pinned memory, generators, storage resize), a device guard, PyTorch's own view kernels
and one boxed fallback that runs each op's CPU kernel on the same memory. Everything the
Python side of the device asks of it is a method of :class:`Core`; nothing outside this package
knows how it is built or loaded.

There is one core. Earlier versions also had a pure-Python one for machines without a C++
compiler; it needed three patches of torch's own classes and a second run of the device's
test suites, while every platform tpu_lab supports has a compiler at hand (Linux and Colab ship
g++, macOS installs clang with ``xcode-select --install``; Windows is not supported). Where the
core is not built yet, the first ``import tpu_lab`` builds it (about a minute, once per torch
version); where it cannot be built, :func:`load` says why and what to install.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Protocol

import torch

from ...errors import DeviceCoreError
from . import build

__all__ = ["Core", "describe", "is_built", "load"]


class Core(Protocol):
    """What the device's Python side uses of the compiled core (``csrc/module.cpp``)."""

    def register_cpu_kernels(self) -> int:
        """Route ops with a CPU kernel and a CompositeExplicitAutograd one to the CPU's."""

    def cpu_view(self, x: torch.Tensor) -> torch.Tensor:
        """A CPU tensor on the bytes of the "tpu" tensor ``x`` (no copy)."""

    def adopt(self, cpu: torch.Tensor) -> torch.Tensor:
        """A "tpu" tensor that takes over the CPU tensor's memory (no copy), charged to HBM."""

    def default_generator(self) -> torch.Generator:
        """The device's default generator (draws what the CPU's does for the same seed)."""

    def set_notifier(self, fn: Callable[[str, str, int], None] | None) -> None:
        """``fn(kind, what, nbytes)`` at sync points (``"sync"``) and transfers."""

    def set_recorder(self, fn: Callable[[str, tuple, dict], None] | None) -> None:
        """``fn(name, args, kwargs)`` for every op a recording thread runs."""

    def set_recording(self, on: bool) -> None:
        """Whether ops are recorded (DEFER_AND_FUSE) in threads without a setting of their own."""

    def set_thread_recording(self, state: int) -> None:
        """This thread's own setting: 1 records, 0 counts, -1 follows the process's."""

    def op_log_begin(self) -> int:
        """Log this thread's ops (blocks nest): where this block's records start."""

    def op_log_mark(self, kind: int, tag: int) -> None:
        """Mark the log where this thread logs (0: a DEFER_AND_FUSE graph ends; 1: compiled
        graph ``tag`` ran)."""

    def op_log_end(self, start: int, make: Callable) -> tuple[list, list]:
        """End a block: its distinct signatures and its ops since ``start`` (see
        ``csrc/oplog.h``), each tensor of a signature as ``make(position, sizes, strides,
        dtype)``; the outermost block turns the log off."""

    def op_logging(self) -> bool:
        """Whether this thread logs its ops."""

    def op_cache_configure(self, cache_only: bool, precision: int, excess: bool) -> None:
        """The process's parts of every single-op key, and cache-only mode."""

    def set_thread_precision(self, precision: int) -> None:
        """This thread's float32 matmul precision (-1: the process's)."""

    def op_cache_dot_ops(self, names: list[str]) -> None:
        """The ops whose precision is part of their key (they run on the MXU)."""

    def op_cache_stats(self, with_entries: bool) -> tuple[int, int, list[tuple[int, int]]]:
        """Requests, hits and, with entries, (reads, last read in ns) per single-op graph."""

    def op_cache_clear(self) -> None: ...

    def set_capacity(self, capacity: int) -> None:
        """HBM of the chip in bytes."""

    def set_oom_wording(self, fn: Callable[[int, int, int], str] | None) -> None:
        """``fn(nbytes, live, capacity)`` words an out-of-memory error."""

    def stats(self) -> tuple[int, int, int, int, int]:
        """HBM capacity, live and peak bytes, allocations and out-of-memory errors."""

    def charge(self, nbytes: int) -> None:
        """Reserve ``nbytes`` of HBM or raise ``torch.OutOfMemoryError``."""

    def release(self, nbytes: int) -> None: ...

    def check(self, nbytes: int) -> None:
        """Raise the out-of-memory error that charging ``nbytes`` would raise."""

    def reset_peak(self) -> None: ...

    def reset_accumulated(self) -> None: ...


def is_built() -> bool:
    """Whether an up-to-date core is built for this torch (building nothing)."""
    return build.status()[0]


def load(build_if_needed: bool = True) -> Core:
    """The compiled core, built first where it is missing or out of date (and
    ``build_if_needed``); a :class:`DeviceCoreError` with the fix where that cannot be done."""
    built, why = build.status()
    if not built:
        if not build_if_needed:
            raise DeviceCoreError(f"tpu_lab's compiled device core is {why}.")
        print(
            f"tpu_lab: building the bundled device's compiled core for torch {torch.__version__} "
            "(once per torch version, about a minute)...",
            file=sys.stderr,
            flush=True,
        )
        try:
            build.build(how="the first import of tpu_lab")
        except RuntimeError as exc:
            raise DeviceCoreError(str(exc)) from None
    return build.load()


def describe() -> str:
    """One line for ``tpu-lab doctor``: whether the core is built, for which torch, how."""
    return build.status()[1]
