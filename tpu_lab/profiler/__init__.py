"""Profiling on the "tpu" device: ``%%tpu profile`` (a timeline of a cell's ops, sync points,
compilations and transfers, a per-op table, a Chrome/Perfetto trace) and TorchTPU's profiler
API (:mod:`.api`: ``torch.tpu.profiler.TpuProfilerConfig``, ``torch_tpu._internal.profiler``).

Timings are host time: on the bundled device they measure the CPU simulating the chip, never a
TPU.
"""

from __future__ import annotations

from .api import (
    ProfilerActivity,
    TpuProfilerConfig,
    last,
    profile,
    register_kineto_backend,
    start_server,
    stop_server,
    xprof_trace_handler,
)
from .capture import Recorder
from .profile import EventSpan, OpSpan, Profile

__all__ = [
    "EventSpan",
    "OpSpan",
    "Profile",
    "ProfilerActivity",
    "Recorder",
    "TpuProfilerConfig",
    "last",
    "profile",
    "register_kineto_backend",
    "start_server",
    "stop_server",
    "xprof_trace_handler",
]
