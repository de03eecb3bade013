"""The bundled device: a simulated "tpu" PyTorch device that executes on the CPU.

Organised like PyTorch's reference out-of-tree backend (OpenReg): :mod:`.driver` owns the
chip's memory and state, :mod:`.kernels` registers the ATen kernels, :mod:`.tpu_module` is
``torch.tpu``, :mod:`.storage` makes serialization work, :mod:`.compile_backend` is
``torch.compile(backend="tpu")``.
"""

from __future__ import annotations

import threading

import torch

from .driver import Chip, MemoryStats, chip, format_bytes, set_topology
from .topology import DEFAULT_TOPOLOGY, GENERATIONS, TOPOLOGY_ENV, Topology, parse_topology

__all__ = [
    "DEFAULT_TOPOLOGY",
    "GENERATIONS",
    "TOPOLOGY_ENV",
    "Chip",
    "MemoryStats",
    "Topology",
    "chip",
    "format_bytes",
    "install",
    "is_installed",
    "parse_topology",
    "set_topology",
]

_lock = threading.Lock()
_libraries: list[torch.library.Library] = []


def is_installed() -> bool:
    return bool(_libraries)


def install() -> None:
    """Make "tpu" a PyTorch device backed by the CPU. Idempotent; call once per process."""
    with _lock:
        if _libraries:
            return
        from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

        from . import (
            accelerator,
            attention,
            autocast,
            compile_backend,
            composite,
            generator,
            kernels,
            storage,
            tpu_module,
            transfers,
        )

        _setup_privateuseone_for_python_backend("tpu", backend_module=tpu_module.build())
        fallback = torch.library.Library("_", "IMPL")
        lib = torch.library.Library("aten", "IMPL")
        kernels.register(lib)
        transfers.register(lib)
        attention.register(lib)
        composite.register(lib)
        autocast.register(lib, fallback)
        storage.install()
        accelerator.install()
        generator.install()
        compile_backend.register()
        _libraries.extend([fallback, lib])
