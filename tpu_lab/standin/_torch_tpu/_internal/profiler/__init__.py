"""``torch_tpu._internal.profiler`` (stand-in): TorchTPU's profile API, from
:mod:`tpu_lab.profiler`."""

from tpu_lab.profiler import (
    ProfilerActivity,
    TpuProfilerConfig,
    profile,
    register_kineto_backend,
    start_server,
    stop_server,
    xprof_trace_handler,
)

__tpu_lab_standin__ = True
__all__ = [
    "ProfilerActivity",
    "TpuProfilerConfig",
    "profile",
    "register_kineto_backend",
    "start_server",
    "stop_server",
    "xprof_trace_handler",
]
