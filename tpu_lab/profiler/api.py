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
from collections.abc import Callable, Mapping
from typing import Any

import torch

from ..errors import NotSimulatedError
from .capture import Recorder

_STABLE_KEYS = frozenset(
    {"check_experimental_options", "device_tracer_level", "host_tracer_level",
     "python_tracer_level", "run_dir", "worker_rank"}
)  # fmt: skip
_last = None


class ProfilerActivity(enum.Enum):
    """The activities to profile (TorchTPU's values)."""

    CPU = 1
    TPU = 2
    GPU = 3


def _value(value) -> str:
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, bool):
        return "true" if value else "false"
    if not isinstance(value, int):
        raise TypeError(f"Expected int, bool or str value, got {type(value)}")
    return str(value)


class TpuProfilerConfig(torch.profiler._ExperimentalConfig):
    """TorchTPU's profiler options for ``torch.profiler.profile(experimental_config=...)``."""

    def __init__(
        self,
        *,
        host_tracer_level: int = 2,
        device_tracer_level: int = 1,
        python_tracer_level: int = 0,
        run_dir: os.PathLike[str] | str | None = None,
        worker_rank: str | None = None,
        experimental_options: Mapping[str, int | bool | str] | None = None,
        check_experimental_options: bool = True,
    ):
        if worker_rank is not None:
            if not isinstance(worker_rank, str):
                raise TypeError(f"worker_rank must be a string, got {type(worker_rank)}")
            if ":" in worker_rank or "," in worker_rank:
                raise ValueError(f"worker_rank string cannot contain ':' or ',': {worker_rank!r}")
        for key in experimental_options or {}:
            if key in _STABLE_KEYS:
                raise ValueError(
                    f"Experimental option key cannot clash with stable option: {key!r}"
                )
            if ":" in key or "," in key:
                raise ValueError(f"Experimental option keys cannot contain ':' or ',': {key!r}")
        parts = [
            f"host_tracer_level:{host_tracer_level}",
            f"device_tracer_level:{device_tracer_level}",
            f"python_tracer_level:{python_tracer_level}",
        ]
        if run_dir is not None:
            parts.append(f"run_dir:{os.fspath(run_dir)}")
        if worker_rank is not None:
            parts.append(f"worker_rank:{_value(worker_rank)}")
        if experimental_options:
            parts += [f"{k}:{_value(v)}" for k, v in experimental_options.items()]
            parts.append(f"check_experimental_options:{str(check_experimental_options).lower()}")
        self.options = ",".join(parts)
        super().__init__(custom_profiler_config=self.options)


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
    """The :class:`~tpu_lab.profiler.profile.Profile` of the latest :func:`profile` block."""
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


def torch_tpu_module():
    """The ``torch.tpu.profiler`` module object (for :mod:`tpu_lab.device.tpu_module`)."""
    import types

    module = types.ModuleType("torch.tpu.profiler", "TorchTPU's profiler API (tpu_lab).")
    module.TpuProfilerConfig = TpuProfilerConfig
    module.__all__ = ["TpuProfilerConfig"]
    return module
