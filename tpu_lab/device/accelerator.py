"""``torch.accelerator`` for the bundled device: synchronize and memory statistics.

PyTorch's Python device guard cannot synchronize and a Python backend has no C++ caching
allocator, so these ``torch.accelerator`` functions would fail with internal asserts. They are
answered here from the simulated chip; every other device type keeps PyTorch's implementation.
"""

from __future__ import annotations

from collections import OrderedDict

import torch
import torch.accelerator.memory as _memory

from . import bridge
from .driver import chip

_originals: dict[str, object] = {}


def _index(device_index) -> int:
    from .tpu_module import _index as module_index

    return module_index(device_index)


def memory_stats(device_index=None, /) -> OrderedDict:
    _index(device_index)
    s = chip().stats()
    return OrderedDict(
        sorted(
            {
                "allocated_bytes.all.current": s.live,
                "allocated_bytes.all.peak": s.peak,
                "allocation.all.allocated": s.allocations,
                "num_alloc_retries": 0,
                "num_ooms": s.ooms,
                "reserved_bytes.all.current": s.live,
                "reserved_bytes.all.peak": s.peak,
            }.items()
        )
    )


def get_memory_info(device_index=None, /) -> tuple[int, int]:
    _index(device_index)
    s = chip().stats()
    return s.free, s.capacity


def reset_peak_memory_stats(device_index=None, /) -> None:
    _index(device_index)
    chip().reset_peak()


def reset_accumulated_memory_stats(device_index=None, /) -> None:
    _index(device_index)
    chip().reset_accumulated()


def empty_cache() -> None:
    """Nothing is cached: a freed tensor's HBM returns to the chip at once."""


def synchronize(device=None, /) -> None:
    """Every op has finished when it returns on the bundled device."""
    _index(device)
    bridge.synchronize()


_REPLACEMENTS = {
    "memory_stats": memory_stats,
    "get_memory_info": get_memory_info,
    "reset_peak_memory_stats": reset_peak_memory_stats,
    "reset_accumulated_memory_stats": reset_accumulated_memory_stats,
    "empty_cache": empty_cache,
    "synchronize": synchronize,
}


def install() -> None:
    """Route the functions above to the simulated chip (``memory_allocated`` and friends read
    ``memory_stats``, so they follow)."""
    if _originals:
        return
    for name, fn in _REPLACEMENTS.items():
        owner = _memory if hasattr(_memory, name) else torch.accelerator
        _originals[name] = getattr(owner, name)
        setattr(owner, name, fn)
        setattr(torch.accelerator, name, fn)
