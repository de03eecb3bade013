"""``torch.tpu.profiler.TpuProfilerConfig``: TorchTPU's profiler options for
``torch.profiler.profile(experimental_config=...)``. A name of the ``torch.tpu`` surface, so
the device builds it with ``torch.tpu`` (light: it imports only torch); tpu_lab's own profiler
(:mod:`tpu_lab.profiler`, above the device) re-exports it."""

from __future__ import annotations

import os
from collections.abc import Mapping

import torch

_STABLE_KEYS = frozenset(
    {"check_experimental_options", "device_tracer_level", "host_tracer_level",
     "python_tracer_level", "run_dir", "worker_rank"}
)  # fmt: skip


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


def torch_tpu_module():
    """The ``torch.tpu.profiler`` module object (for :mod:`.tpu_module`)."""
    import types

    module = types.ModuleType("torch.tpu.profiler", "TorchTPU's profiler API (tpu_lab).")
    module.TpuProfilerConfig = TpuProfilerConfig
    module.__all__ = ["TpuProfilerConfig"]
    return module
