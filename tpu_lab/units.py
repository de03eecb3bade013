"""HBM figures as every layer reads them: a chip's memory statistics and byte counts as text.

Both runtime adapters (TorchTPU, the bundled device) report :class:`MemoryStats`, and the views
print bytes with :func:`format_bytes`; this module imports nothing, so that reading them never
starts the simulated device.
"""

from __future__ import annotations

from dataclasses import dataclass


def format_bytes(n: int) -> str:
    """``1536`` -> ``'1.50 KiB'``."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{int(value)} B" if unit == "B" else f"{value:.2f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


@dataclass(frozen=True)
class MemoryStats:
    """HBM of the chip this process drives, in bytes."""

    capacity: int
    live: int
    peak: int
    allocations: int
    ooms: int
    #: False where the backend reports no allocator statistics (live/peak are then 0).
    measured: bool = True

    @property
    def free(self) -> int:
        return self.capacity - self.live
