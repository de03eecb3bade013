"""Profiling on the "tpu" device: ``%%tpu profile`` (a timeline of a cell's ops, sync points,
compilations and transfers, a per-op table, a Chrome/Perfetto trace) and TorchTPU's profiler
API (:mod:`.api`: ``torch_tpu._internal.profiler``; :mod:`.config`:
``torch.tpu.profiler.TpuProfilerConfig``).

Timings are host time: on the bundled device they measure the CPU simulating the chip, never a
TPU. Names are imported on first use (``torch.tpu`` imports :mod:`.config` as it is built).
"""

from __future__ import annotations

import importlib

_WHERE = {
    "EventSpan": "report",
    "OpSpan": "report",
    "Profile": "report",
    "ProfilerActivity": "api",
    "Recorder": "capture",
    "TpuProfilerConfig": "config",
    "last": "api",
    "profile": "api",
    "register_kineto_backend": "api",
    "start_server": "api",
    "stop_server": "api",
    "xprof_trace_handler": "api",
}
__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name in _WHERE:
        return getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
    raise AttributeError(f"module 'tpu_lab.profiler' has no attribute '{name}'")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
