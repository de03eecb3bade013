"""TorchTPU's profiler API (``torch_tpu._internal.profiler`` and ``torch.tpu.profiler``), on
the bundled device.

- :class:`TpuProfilerConfig` is TorchTPU's ``torch.profiler._ExperimentalConfig``: pass it to
  ``torch.profiler.profile(experimental_config=...)``; the same options string is built and
  checked, and PyTorch's profiler records the host side as usual.
- :func:`profile` (with :class:`ProfilerActivity` and :func:`xprof_trace_handler`) records the
  block and writes a Chrome trace (``<host>[_<rank>].trace.json``) into the handler's folder,
  where TorchTPU writes an XProf ``.xplane.pb``; the last profile is :func:`last`.
- :func:`start_server` / :func:`stop_server` start XProf's server on a TPU VM only.
"""

from __future__ import annotations

import contextlib
import enum
import os
import socket
from collections.abc import Callable
from typing import Any

import torch

from ..device.profiler_config import TpuProfilerConfig  # noqa: F401  (the API's names, here as in TorchTPU)
from ..errors import NotSimulatedError
from .capture import Recorder

_last = None


class ProfilerActivity(enum.Enum):
    """The activities to profile (TorchTPU's values)."""

    CPU = 1
    TPU = 2
    GPU = 3


def xprof_trace_handler(
    dir_name: os.PathLike[str] | str, worker_rank: str | None = None
) -> Callable[[Any], str]:
    """``on_trace_ready`` for :func:`profile`: the folder the trace goes to."""

    def handler_fn(prof: Any) -> str:
        return str(dir_name)

    handler_fn.worker_rank = worker_rank
    return handler_fn


@contextlib.contextmanager
def profile(
    activities: list[ProfilerActivity] | None = None,
    on_trace_ready: Callable[[Any], str] | None = None,
):
    """Record the block; write its Chrome trace into the folder ``on_trace_ready`` names."""
    global _last
    if not on_trace_ready:
        raise ValueError("on_trace_ready must be provided for profiler.profile.")
    if activities is None:
        activities = [ProfilerActivity.CPU, ProfilerActivity.TPU]
    if ProfilerActivity.GPU in activities:
        raise ValueError("GPU profiling is not supported.")
    if torch.compiler.is_compiling():
        raise RuntimeError(
            "Using it in a compiled region would force the profiled code to run eagerly, and "
            "the trace would not reflect compiled execution."
        )
    folder = on_trace_ready(None)
    rank = getattr(on_trace_ready, "worker_rank", None)
    recorder = Recorder("profiler.profile")
    with recorder:
        yield None
    _last = recorder.profile
    os.makedirs(folder, exist_ok=True)
    name = socket.gethostname() + (f"_{rank}" if rank else "")
    _last.export_chrome_trace(os.path.join(folder, f"{name}.trace.json"))


def last():
    """The :class:`~tpu_lab.profiler.report.Profile` of the latest :func:`profile` block."""
    return _last


def start_server(port: int = 9012) -> None:
    raise NotSimulatedError(
        "start_server starts XProf's profiling server, which needs a TPU; on the bundled device "
        "profile(...) writes a Chrome trace: open it at https://ui.perfetto.dev."
    )


def stop_server() -> None:
    raise NotSimulatedError("stop_server: no XProf server runs on the bundled device.")


def register_kineto_backend() -> None:
    """TorchTPU registers its Kineto backend here; PyTorch's CPU profiler needs none."""
