"""``torch.tpu`` for the bundled device: TorchTPU 0.2.0's public names and semantics.

Registered with ``torch._register_device_module("tpu", ...)``, so PyTorch (``torch.manual_seed``,
``torch.autocast``, ``torch.accelerator``) and Hugging Face find it where they find TorchTPU's.
As in TorchTPU on torch >= 2.11, the device-management names (``is_available``,
``device_count``, ``synchronize``...) are internal: called from user code they raise and point to
``torch.accelerator``, so a notebook that runs here also runs on a real TPU.
``TORCH_TPU_ALLOW_LEGACY_DEVICE_APIS=1`` turns the error into a one-time warning, as there.
"""

from __future__ import annotations

import functools
import math
import os
import sys
import types
import warnings
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from .. import _install
from ..errors import NotSimulatedError
from . import modes, streams
from .compile_cache import PerfStats

#: Environment variable (TorchTPU's own): ``1`` makes ``torch.tpu.is_available()`` and the other
#: internal device APIs warn instead of raising, as in TorchTPU; unset by default.
LEGACY_ENV = "TORCH_TPU_ALLOW_LEGACY_DEVICE_APIS"

#: TorchTPU's list of dtypes accepted by ``torch.autocast("tpu", dtype=...)``.
AMP_SUPPORTED_DTYPES = [
    torch.bfloat16, torch.bool, torch.complex128, torch.complex64, torch.float16,
    torch.float32, torch.float64, torch.float8_e4m3fn, torch.float8_e4m3fnuz,
    torch.float8_e5m2, torch.float8_e5m2fnuz, torch.float8_e8m0fnu, torch.int16, torch.int32,
    torch.int64, torch.int8, torch.uint16, torch.uint32, torch.uint64, torch.uint8,
]  # fmt: skip


@dataclass(frozen=True)
class _TpuDeviceProperties:
    name: str
    total_memory: int
    multi_processor_count: int = 1


def _index(device, topology) -> int:
    """The device index named by ``device``; this process drives only ``tpu:0`` of
    ``topology``."""
    if device is None:
        return 0
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != "tpu":
            raise ValueError(f"Expected a 'tpu' device, got {str(device)!r}.")
        index = device.index or 0
    elif isinstance(device, int) and not isinstance(device, bool):
        index = device
    else:
        raise TypeError(f"got unrecognized device type: {device!r}")
    if index != 0:
        raise ValueError(
            f"Cannot set TPU device to index {index}, current process is bound to device index "
            "0. Changing the active TPU device within a process is not supported. (Each process "
            f"drives one chip; the simulated {topology.name} has {topology.devices}: multi-chip "
            "work runs one process per chip.)"
        )
    return index


_warned: set[str] = set()


def _internal(prefer: str, name: str | None = None):
    """TorchTPU's internal device APIs: only PyTorch itself may call them."""

    def decorate(fn):
        api = name or fn.__name__

        @functools.wraps(fn)
        def guarded(*args, **kwargs):
            caller = sys._getframe(1).f_globals.get("__name__", "")
            if not (caller == "torch" or caller.startswith("torch.")):
                if os.environ.get(LEGACY_ENV) != "1":
                    raise RuntimeError(
                        f"{api} is internal to TorchTPU and can only be called by the PyTorch "
                        f"framework (torch and torch_tpu). Use {prefer} instead."
                    )
                if api not in _warned:
                    _warned.add(api)
                    warnings.warn(
                        f"<TorchTpu/ApiStage/InternalApi/> {api} is internal to TorchTPU and "
                        f"may change or be removed without notice. Use {prefer} instead.",
                        UserWarning,
                        stacklevel=2,
                    )
            return fn(*args, **kwargs)

        return guarded

    return decorate


class _TpuModule(types.ModuleType):
    """A module type so that ``eager_mode`` and ``allow_excess_precision`` are properties (of
    the device, ``_device``)."""

    _device = None

    @property
    def eager_mode(self) -> modes.EagerMode:
        return self._device.eager_mode

    @property
    def _initialized(self) -> bool:
        # As torch.cuda's module flag: torch.utils.checkpoint stashes and restores the device's
        # RNG state (dropout in a recomputed segment draws the same mask) only when it is true.
        return is_initialized()

    @eager_mode.setter
    def eager_mode(self, mode) -> None:
        self._device.put_eager_mode(mode)

    @property
    def allow_excess_precision(self) -> bool:
        """Whether XLA may keep more precision than asked (TorchTPU: False unless XLA_FLAGS has
        ``--xla_allow_excess_precision``); a change makes every later graph compile anew."""
        return self._device.allow_excess_precision

    @allow_excess_precision.setter
    def allow_excess_precision(self, value: bool) -> None:
        self._device.allow_excess_precision = value

    def __getattr__(self, name: str):
        raise AttributeError(f"module 'torch.tpu' has no attribute '{name}'")

    def __dir__(self) -> list[str]:
        return sorted({*super().__dir__(), "eager_mode", "allow_excess_precision"})


_initialized = False


def _lazy_init() -> None:
    global _initialized
    _initialized = True


def is_initialized() -> bool:
    return _initialized


def _is_in_bad_fork() -> bool:
    return False


@_internal("torch.accelerator.is_available")
def is_available() -> bool:
    return True


@_internal("torch.accelerator.device_count")
def device_count() -> int:
    return 1


class _NotSimulated(types.ModuleType):
    """A TorchTPU submodule whose functions need real hardware."""

    def __init__(self, name: str, names: tuple[str, ...], **available) -> None:
        super().__init__(f"torch.tpu.{name}")
        self.__all__ = sorted({*names, *available})
        for attr, value in available.items():
            setattr(self, attr, value)

    def __dir__(self) -> list[str]:
        return sorted({*super().__dir__(), *self.__all__})

    def __getattr__(self, attr: str):
        if attr.startswith("__") or attr not in self.__all__:
            raise AttributeError(f"module '{self.__name__}' has no attribute '{attr}'")
        raise NotSimulatedError(
            f"{self.__name__}.{attr} runs only on a real TPU with TorchTPU "
            f"({_install.hint('tpu')} on a TPU VM); the bundled device does not simulate it."
        )


@contextmanager
def _custom_compiler_options(options: dict[str, str]):
    """Accepted and ignored: the bundled device has no XLA compiler to pass them to."""
    if not isinstance(options, dict):
        raise TypeError(f"custom_compiler_options expects a dict of strings, got {options!r}.")
    yield


# torch.tpu.ops in TorchTPU 0.2.0: TPU kernels with no CPU counterpart to simulate.
_OPS = (
    "align_jagged_to_multiple", "all_gather_dim", "max_pool1d", "max_pool1d_backward",
    "max_pool2d", "max_pool2d_backward", "max_pool3d", "max_pool3d_backward",
    "optimization_barrier", "ragged_all_to_all", "ragged_dot", "ragged_dot_weight_grad", "recv",
    "reduce_scatter_dim", "send", "sparse_dense_matmul", "sparse_dense_matmul_activation_unstack",
    "sparse_dense_matmul_grad_with_adagrad", "sparse_dense_matmul_grad_with_adam",
    "sparse_dense_matmul_grad_with_sgd", "sparse_dense_matmul_gradient_stack", "sparse_gather",
    "sparse_gather_backward", "sparse_iota", "sparse_map_row", "splash_sdpa",
    "strip_jagged_padding",
)  # fmt: skip


class _DeviceFunctions:
    """The ``torch.tpu`` functions that read or change the device (bound to it by
    :func:`build`): their names are TorchTPU's, so they become the module's attributes."""

    def __init__(self, device) -> None:
        self._device = device

    def _index(self, device) -> int:
        return _index(device, self._device.chip.topology)

    def set_tpu_launch_env(self, *, nnodes=None, nproc_per_node=None) -> None:
        """TorchTPU's launch environment on the bundled device (:mod:`.launch_env`); one rank
        per device of a host of the simulated topology unless ``nproc_per_node`` says
        otherwise."""
        from .launch_env import set_tpu_launch_env

        if nproc_per_node is None:
            topology = self._device.chip.topology
            nproc_per_node = topology.devices // topology.hosts
        set_tpu_launch_env(nnodes=nnodes, nproc_per_node=nproc_per_node)

    @_internal("torch.accelerator.current_device_index")
    def current_device(self) -> int:
        return 0

    @_internal("torch.accelerator.set_device_index")
    def set_device(self, device) -> None:
        self._index(device)

    @_internal("torch.accelerator.device_index", name="device")
    def device(self, device) -> _DeviceOf:
        """Select a device inside the block; only ``tpu:0`` exists in a process."""
        return _DeviceOf(self._index(device))

    def device_of(self, obj) -> _DeviceOf:
        """The device of a tensor, as a context manager (a no-op for non-"tpu" tensors)."""
        return _DeviceOf(self._index(obj.get_device()) if obj.device.type == "tpu" else -1)

    def get_device_name(self, device=None) -> str:
        return self._device.chip.name

    def get_device_properties(self, device=None) -> _TpuDeviceProperties:
        chip = self._device.chip
        return _TpuDeviceProperties(chip.name, chip.capacity)

    @_internal("torch.accelerator.synchronize")
    def synchronize(self, device=None) -> None:
        self._index(device)
        self._device.synchronize()

    def manual_seed(self, seed: int) -> None:
        self._device.generator.manual_seed(int(seed))

    def manual_seed_all(self, seed: int) -> None:
        self._device.generator.manual_seed(int(seed))

    @_internal("torch.accelerator.random.initial_seed")
    def initial_seed(self) -> int:
        return self._device.generator.initial_seed()

    def _rng_device(self, device) -> None:
        if isinstance(device, str | torch.device) and torch.device(device).type != "tpu":
            raise ValueError(
                "expected device type 'tpu' for RNG state access, got "
                f"'{torch.device(device).type}'"
            )
        self._index(device)

    @_internal("torch.accelerator.random.get_rng_state")
    def get_rng_state(self, device="tpu") -> torch.Tensor:
        self._rng_device(device)
        return self._device.generator.get_state()

    def set_rng_state(self, new_state: torch.Tensor, device="tpu") -> None:
        self._rng_device(device)
        self._device.generator.set_state(new_state)

    def set_eager_mode(self, mode):
        """Run the block in ``mode``; the previous mode comes back on exit, also on
        exceptions (a context variable: other threads and tasks keep theirs)."""
        return self._device.scoped_eager_mode(mode)

    def precision(self, mode):
        """Float32 matmul precision inside the block (TorchTPU: a context manager over the
        global precision of ``torch.set_float32_matmul_precision``). Numbers change only while
        the TPU numerics emulation is on (``tpu_lab.numerics.emulate``)."""
        return self._device.scoped_precision(mode)

    def _mesh(self, mesh_shape, dcn_mesh_shape=None) -> torch.Tensor:
        topology = self._device.chip.topology
        shape = tuple(mesh_shape)
        if dcn_mesh_shape is not None:
            raise NotSimulatedError(
                "dcn_mesh_shape describes a multi-host slice; the bundled device simulates one "
                "host."
            )
        if math.prod(shape) != topology.devices:
            raise ValueError(
                f"mesh_shape {shape} has {math.prod(shape)} devices but the simulated "
                f"{topology.name} has {topology.devices}."
            )
        return torch.arange(topology.devices, dtype=torch.int64).reshape(shape)

    def topology_aware_mesh(
        self, mesh_shape, *, dcn_mesh_shape=None, allow_split_physical_axes=False,
        contiguous_submeshes=False,
    ) -> torch.Tensor:  # fmt: skip
        """Global ranks laid out as ``mesh_shape`` over the host's chips (deprecated in 0.2.0)."""
        warnings.warn(
            "<TorchTpu/ApiStage/DeprecatedApi/> topology_aware_mesh is deprecated as of "
            "TorchTPU 0.2.0 and will be removed in a future release: Use "
            "torch.tpu.distributed.topology_aware_mesh instead.",
            DeprecationWarning,
            stacklevel=2,
        )
        return self._mesh(mesh_shape, dcn_mesh_shape)

    def _hbm_usage_summary(self) -> str:
        """TorchTPU's text: HBM held by compiled executables (none on the bundled device)."""
        device = self._device
        executables = device.compiled_graphs + device.cache.stats().num_compilations
        return f"CompilationCache HBM usage: 0B for {executables} executables."

    # The eager compile cache (DEFER_AND_FUSE graphs, single ops otherwise), under TorchTPU's
    # private names (used by its docs).
    def _get_cache_requests(self) -> int:
        return self._device.cache.counts()[0]

    def _get_cache_hits(self) -> int:
        return self._device.cache.counts()[1]

    def _get_cache_misses(self) -> int:
        requests, hits = self._device.cache.counts()
        return requests - hits

    def _get_cache_stats(self) -> PerfStats:
        return self._device.cache.stats()

    def _clear_cache(self) -> None:
        self._device.cache.clear()

    def _set_cache_only(self, cache_only: bool = True) -> None:
        self._device.set_cache_only(cache_only)

    def _set_dump_on_cache_miss(self, enable: bool = True) -> None:
        self._device.cache.dump_on_miss = bool(enable)

    def _get_dump_on_cache_miss(self) -> bool:
        return self._device.cache.dump_on_miss


class _DeviceOf:
    def __init__(self, idx: int) -> None:
        self.idx = idx

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> bool:
        return False


def _submodules(functions: _DeviceFunctions) -> dict[str, types.ModuleType]:
    # --- issue 15 (TorchTPU code on a laptop): pallas, profiler, launch env
    from . import pallas
    from .profiler_config import torch_tpu_module as profiler_module

    return {
        "compiler": _NotSimulated(
            "compiler", (), custom_compiler_options=_custom_compiler_options
        ),
        "distributed": _NotSimulated(
            "distributed",
            ("spmd_safe", "window_num_stripes", "window_stripe_chunk_mb"),
            set_tpu_launch_env=functions.set_tpu_launch_env,
            topology_aware_mesh=lambda mesh_shape, *, dcn_mesh_shape=None, **_: functions._mesh(
                mesh_shape, dcn_mesh_shape
            ),
        ),
        "ops": _NotSimulated("ops", _OPS),
        "optimizers": _NotSimulated(
            "optimizers", ("AdamW", "Muon", "Optimizer", "Sgd", "SingleTraceTrainer")
        ),
        "pallas": pallas.torch_tpu_module(),  # JAX's Pallas interpreter (tpu_lab.device.pallas)
        "profiler": profiler_module(),  # TpuProfilerConfig (.profiler_config)
    }


def get_amp_supported_dtype() -> list[torch.dtype]:
    return list(AMP_SUPPORTED_DTYPES)


_FUNCTIONS = (
    _lazy_init, is_initialized, _is_in_bad_fork, is_available, device_count,
    get_amp_supported_dtype,
)  # fmt: skip

_BOUND = (
    "current_device", "set_device", "device", "device_of", "get_device_name",
    "get_device_properties", "synchronize", "manual_seed", "manual_seed_all", "initial_seed",
    "get_rng_state", "set_rng_state", "set_eager_mode", "precision", "topology_aware_mesh",
    "_hbm_usage_summary", "_get_cache_requests", "_get_cache_hits", "_get_cache_misses",
    "_get_cache_stats", "_clear_cache", "_set_cache_only", "_set_dump_on_cache_miss",
    "_get_dump_on_cache_miss",
)  # fmt: skip


def build(tpu_device) -> _TpuModule:
    """A fresh ``torch.tpu`` module object for the bundled device ``tpu_device``."""
    module = _TpuModule("torch.tpu", "torch.tpu on tpu_lab's bundled (simulated) device.")
    module._device = tpu_device
    for fn in _FUNCTIONS:
        setattr(module, fn.__name__, fn)
    functions = _DeviceFunctions(tpu_device)
    for name in _BOUND:
        setattr(module, name, getattr(functions, name))
    module.EagerMode = modes.EagerMode
    module.Precision = modes.Precision
    module.Stream = streams.Stream
    module.Event = streams.Event
    module.stream = streams.stream
    module.set_stream = _internal("torch.accelerator.set_stream")(streams.set_stream)
    module.current_stream = _internal("torch.accelerator.current_stream")(streams.current_stream)
    module.default_stream = streams.default_stream
    module.default_generators = (tpu_device.generator,)
    for name, sub in _submodules(functions).items():
        setattr(module, name, sub)
        sys.modules[f"torch.tpu.{name}"] = sub
    return module
