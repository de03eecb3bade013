"""Profiling on the "tpu" device: ``%%tpu profile`` (a timeline of a cell's ops, sync points,
compilations and transfers, a per-op table, a Chrome/Perfetto trace) and TorchTPU's profiler
API (:mod:`.api`: ``torch_tpu._internal.profiler``, with
``torch.tpu.profiler.TpuProfilerConfig`` from :mod:`tpu_lab.device.profiler_config`).

Timings are host time: on the bundled device they measure the CPU simulating the chip, never a
TPU. Names are imported on first use.
"""

from __future__ import annotations

import importlib

_WHERE = {
    "EventSpan": "report",
    "OpSpan": "report",
    "Profile": "report",
    "ProfilerActivity": "api",
    "Recorder": "capture",
    "TpuProfilerConfig": "api",
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
