"""The device of this process: one object that owns what the bundled "tpu" device is here.

TorchTPU drives one chip per process; so does the bundled device. :func:`current` creates its
:class:`Device` on first use (never at import): it loads the compiled core (:mod:`.core`),
makes PyTorch see "tpu" as a backend, and keeps the chip (topology, HBM), the compile cache
with the recording of ``DEFER_AND_FUSE``, the process's eager mode and matmul precision, and
the device's generator. Every other module of the device reads them from here; what happens
(sync points, transfers, cache hits and misses, out-of-memory errors, mode changes) is
published on the event bus (:mod:`tpu_lab.bus`), which costs one check while nobody
listens.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import torch

from ..bus import BUS
from ..hardware.topology import Topology, topology_from_env
from . import modes
from .chip import Chip
from .compile_cache import DOT_OPS, CompileCache
from .core import Core
from .modes import EAGER_SCOPE, PRECISION_SCOPE, EagerMode, Precision

_FUSE = EagerMode.DEFER_AND_FUSE


class Device:
    """The "tpu" device this process drives (created by :func:`current`)."""

    def __init__(self, core: Core, topology: Topology) -> None:
        self.core = core
        self.chip = Chip(core, topology, self.publish)
        self.cache = CompileCache(self)
        self.generator: torch.Generator = core.default_generator()
        #: Graphs the "tpu" compile backend compiled (forward and backward).
        self.compiled_graphs = 0
        #: Those graphs, for estimates (their estimates are worked out when first asked for).
        self.compiled: list = []
        #: Decompositions for graphs compiled for "tpu" while the TPU numerics emulation is on
        #: (it sets them; :mod:`.emulation`), else None.
        self.graph_decompositions: dict | None = None
        self._eager_mode = EagerMode.DEFER_NEVER
        self._precision = Precision.DEFAULT
        self._excess: bool | None = None  # None until first read: then XLA_FLAGS decides
        core.set_notifier(self._on_core)
        core.set_recorder(self.cache.record)
        core.op_cache_dot_ops(sorted(DOT_OPS))
        self._configure_core()

    # -- what happens ---------------------------------------------------------------------

    @staticmethod
    def publish(kind: str, **data) -> None:
        """Tell the event bus (nothing to build while nobody listens)."""
        if BUS.subscribers:
            BUS.emit(kind, **data)

    def _on_core(self, kind: str, what: str, nbytes: int) -> None:
        """The compiled core's call at sync points and transfers."""
        if kind == "sync":
            self.sync_point(what)
            self.publish("sync", reason=what, nbytes=nbytes)
            return
        if what == "tpu->cpu":
            self.sync_point("copy to host")
        self.publish("transfer", direction=what, nbytes=nbytes)

    def sync_point(self, reason: str) -> None:
        """The host needs results: where this thread records, its graph ends here."""
        if self.recording:
            self.cache.flush(reason)

    @staticmethod
    def synchronize() -> None:
        """``torch.accelerator.synchronize()``: a sync point (the core reports it)."""
        torch.accelerator.synchronize()

    # -- tensors --------------------------------------------------------------------------

    def payload(self, x: torch.Tensor) -> torch.Tensor:
        """A CPU tensor on the bytes of the "tpu" tensor ``x`` (no copy)."""
        return self.core.cpu_view(x)

    def wrap(self, cpu: torch.Tensor) -> torch.Tensor:
        """A "tpu" tensor on the bytes of the CPU tensor ``cpu`` (no copy), charged to HBM."""
        return self.core.adopt(cpu)

    @staticmethod
    def has_payload(x) -> bool:
        """Whether ``x`` is a "tpu" tensor with bytes (not a fake tensor while tracing)."""
        return (
            isinstance(x, torch.Tensor)
            and x.device.type == "tpu"
            and not isinstance(x, torch._subclasses.FakeTensor)
        )

    # -- the eager mode -------------------------------------------------------------------

    @property
    def eager_mode(self) -> EagerMode:
        """The mode of this context: its innermost ``set_eager_mode`` block, else the process's."""
        scoped = EAGER_SCOPE.get()
        return self._eager_mode if scoped is None else scoped

    @property
    def recording(self) -> bool:
        """Whether this context records ops for ``DEFER_AND_FUSE``."""
        return self.eager_mode is _FUSE

    def put_eager_mode(self, mode) -> None:
        """``torch.tpu.eager_mode = mode``: the process's mode, for every context without a
        block of its own."""
        mode = modes.as_eager_mode(mode)
        modes.refuse_inside_compile()
        old = self.eager_mode
        self._eager_mode = mode
        self.core.set_recording(mode is _FUSE)
        self._mode_changed(old)

    @contextlib.contextmanager
    def scoped_eager_mode(self, mode) -> Iterator[EagerMode]:
        """``torch.tpu.set_eager_mode(mode)``: this context runs the block in ``mode``; the
        previous mode comes back on exit, also on exceptions."""
        mode = modes.as_eager_mode(mode)
        modes.refuse_inside_compile()
        old = self.eager_mode
        token = EAGER_SCOPE.set(mode)
        self._thread_changed()
        self._mode_changed(old)
        try:
            yield mode
        finally:
            inner = self.eager_mode
            EAGER_SCOPE.reset(token)
            self._thread_changed()
            self._mode_changed(inner)

    def _mode_changed(self, old: EagerMode) -> None:
        new = self.eager_mode
        if old is _FUSE and new is not _FUSE:
            self.cache.flush("eager mode change")  # leaving DEFER_AND_FUSE ends the graph
        if old is not new:
            self.publish("mode_change", old=old, new=new)

    # -- the float32 matmul precision -----------------------------------------------------

    @property
    def precision(self) -> Precision:
        """This context's innermost ``torch.tpu.precision`` block, else the process's."""
        scoped = PRECISION_SCOPE.get()
        return self._precision if scoped is None else scoped

    def set_global_precision(self, precision: Precision) -> None:
        """The process's precision (``torch.set_float32_matmul_precision``)."""
        self._precision = Precision(precision)
        self._configure_core()

    @contextlib.contextmanager
    def scoped_precision(self, precision) -> Iterator[None]:
        """``torch.tpu.precision(p)``: float32 matmuls of this context at ``p`` in the block."""
        token = PRECISION_SCOPE.set(modes.as_precision(precision))
        self._thread_changed()
        try:
            yield
        finally:
            PRECISION_SCOPE.reset(token)
            self._thread_changed()

    @property
    def allow_excess_precision(self) -> bool:
        """``torch.tpu.allow_excess_precision``: as set, else ``XLA_FLAGS``' value, else False."""
        if self._excess is None:
            self._excess = modes.excess_precision_from_flags()
        return self._excess

    @allow_excess_precision.setter
    def allow_excess_precision(self, value: bool) -> None:
        if not isinstance(value, bool):
            raise TypeError(f"allow_excess_precision must be True or False, got {value!r}.")
        self._excess = value
        self._configure_core()

    # -- the core's share of the settings -------------------------------------------------

    def _configure_core(self) -> None:
        """The process's settings that are part of every compiled op's key, and cache-only."""
        self.core.op_cache_configure(
            self.cache.cache_only, int(self._precision), self.allow_excess_precision
        )

    def _thread_changed(self) -> None:
        """This thread's blocks, for the core (it records and keys ops per thread)."""
        scoped_mode, scoped_precision = EAGER_SCOPE.get(), PRECISION_SCOPE.get()
        self.core.set_thread_recording(-1 if scoped_mode is None else int(scoped_mode is _FUSE))
        self.core.set_thread_precision(-1 if scoped_precision is None else int(scoped_precision))

    def set_cache_only(self, cache_only: bool) -> None:
        """``torch.tpu._set_cache_only``: a compile-cache miss raises instead of compiling."""
        self.cache.cache_only = bool(cache_only)
        self._configure_core()

    # -- the topology ---------------------------------------------------------------------

    def use_topology(self, topology: Topology) -> None:
        """Simulate ``topology``; live tensors keep their bytes on the new chip."""
        self.chip.use(topology)


_lock = threading.Lock()
_device: Device | None = None
_libraries: list[torch.library.Library] = []


def exists() -> bool:
    """Whether this process's device has been created (nothing is created by asking)."""
    return _device is not None


def current() -> Device:
    """This process's device, created on first use: "tpu" becomes a PyTorch device then."""
    global _device
    if _device is None:
        with _lock:
            if _device is None:
                _device = _create()
    return _device


def _create() -> Device:
    """Make "tpu" a PyTorch device backed by the compiled core (see :mod:`.core`)."""
    from . import autocast, backends_tpu, compile_backend, dropout, flex_attention, rnn, tpu_module
    from .core import load

    core = load()
    torch.utils.rename_privateuse1_backend("tpu")
    core.register_cpu_kernels()
    device = Device(core, topology_from_env())
    torch.utils.generate_methods_for_privateuse1_backend(for_storage=True)
    torch._register_device_module("tpu", tpu_module.build(device))
    fallback = torch.library.Library("_", "IMPL")
    library = torch.library.Library("aten", "IMPL")
    library.m.impl("dropout", "AutogradPrivateUse1", dropout.dropout, False)
    rnn.register(library)
    autocast.register(library, fallback)
    torch.set_autocast_dtype("tpu", torch.bfloat16)  # TorchTPU's default
    compile_backend.register(device)
    modes.install(device.set_global_precision)
    backends_tpu.register(device)  # torch.backends.tpu.allow_excess_precision (tutorials)
    flex_attention.register()  # "tpu" passes flex_attention's device check, as in TorchTPU
    _libraries.extend([fallback, library])
    return device
