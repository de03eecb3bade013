"""The bundled device: a simulated "tpu" PyTorch device that executes on the CPU.

Organised like PyTorch's reference out-of-tree backend (OpenReg): a compiled core (``csrc/``:
allocator, hooks, guard, generator, view kernels and a boxed CPU fallback; :mod:`.core` builds
and loads it) that PyTorch sees as a real backend, and Python for policy: :mod:`.bridge` (what
the policy needs from either core), :mod:`.driver` (the chip), :mod:`.tpu_module`
(``torch.tpu``), :mod:`.compile_cache` and :mod:`.modes` (eager modes), :mod:`.compile_backend`
(``torch.compile(backend="tpu")``). Where the compiled core is not built, the pure-Python
kernels (:mod:`.kernels` and the modules :mod:`.patches` lists) stand in.
"""

from __future__ import annotations

import os
import threading

import torch

from . import bridge, core, modes
from .core import CoreChoice
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
#: The core this process runs (set by :func:`install`).
CORE: CoreChoice | None = None


def is_installed() -> bool:
    return bool(_libraries)


def install() -> None:
    """Make "tpu" a PyTorch device backed by the CPU. Idempotent; call once per process."""
    global CORE
    with _lock:
        if _libraries:
            return
        from . import autocast, backends_tpu, compile_backend, dropout, rnn

        choice = core.choose()
        fallback = torch.library.Library("_", "IMPL")
        lib = torch.library.Library("aten", "IMPL")
        if choice.name == "compiled":
            _install_compiled()
        else:
            _install_python(lib)
        lib.m.impl("dropout", "AutogradPrivateUse1", dropout.dropout, False)
        rnn.register(lib)
        autocast.register(lib, fallback)
        torch.set_autocast_dtype("tpu", torch.bfloat16)  # TorchTPU's default
        compile_backend.register()
        modes.install()  # torch.set_float32_matmul_precision sets the TPU's, as in TorchTPU
        backends_tpu.register()  # torch.backends.tpu.allow_excess_precision, as tutorials set it
        _libraries.extend([fallback, lib])
        CORE = choice
    if os.environ.get(modes.NUMERICS_ENV, "").strip():  # else numerics needs no import
        from . import emulation

        emulation.emulate(emulation.requested_at_start())


def _install_compiled() -> None:
    """The C++ backend: PyTorch sees a device with its own allocator, hooks and guard."""
    from . import tpu_module

    torch.utils.rename_privateuse1_backend("tpu")
    native = core.load()
    native.register_cpu_kernels()
    chip().use_native(native)
    bridge.use_native(native)
    torch.utils.generate_methods_for_privateuse1_backend(for_storage=True)
    torch._register_device_module("tpu", tpu_module.build())


def _install_python(lib: torch.library.Library) -> None:
    """The pure-Python kernels, and the patches of torch classes they need (patches.py)."""
    from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

    from . import attention, composite, kernels, patches, tpu_module, transfers

    _setup_privateuseone_for_python_backend("tpu", backend_module=tpu_module.build())
    kernels.register(lib)
    transfers.register(lib)
    attention.register(lib)
    composite.register(lib)
    patches.install_python_core()
