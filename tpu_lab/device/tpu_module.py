"""``torch.tpu`` for the bundled device: TorchTPU's public names with the same semantics.

Registered with ``torch._register_device_module("tpu", ...)``, so PyTorch (``torch.manual_seed``,
``torch.autocast``, ``torch.accelerator``) and Hugging Face find it where they find TorchTPU's.
"""

from __future__ import annotations

import sys
import types
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from ..errors import NotSimulatedError
from . import modes, streams
from .driver import chip, format_bytes
from .kernels import default_generator

_initialized = False


@dataclass(frozen=True)
class _TpuDeviceProperties:
    name: str
    total_memory: int
    multi_processor_count: int

    def __repr__(self) -> str:
        return (
            f"_TpuDeviceProperties(name='{self.name}', "
            f"total_memory={self.total_memory // (1 << 20)}MB, "
            f"multi_processor_count={self.multi_processor_count})"
        )


def _index(device) -> int:
    """The device index named by ``device``; this process drives only ``tpu:0``."""
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
        raise TypeError(f"Expected a device index, 'tpu:N' or torch.device, got {device!r}.")
    if index != 0:
        raise RuntimeError(
            f"tpu:{index} is not available: each process drives one chip, always tpu:0 "
            f"(as with TorchTPU). The simulated topology {chip().topology.name} has "
            f"{chip().topology.devices} chips; multi-chip work runs one process per chip."
        )
    return index


class _TpuModule(types.ModuleType):
    """A module type so that ``eager_mode`` and ``precision`` can be properties."""

    @property
    def eager_mode(self) -> modes.EagerMode:
        return modes.get_eager_mode()

    @eager_mode.setter
    def eager_mode(self, mode) -> None:
        modes.put_eager_mode(mode)

    @property
    def precision(self) -> modes.Precision:
        return modes.SETTINGS.precision

    @precision.setter
    def precision(self, value) -> None:
        modes.SETTINGS.precision = modes.as_precision(value)

    @property
    def allow_excess_precision(self) -> bool:
        return modes.SETTINGS.allow_excess_precision

    @allow_excess_precision.setter
    def allow_excess_precision(self, value: bool) -> None:
        if not isinstance(value, bool):
            raise TypeError(f"allow_excess_precision must be True or False, got {value!r}.")
        modes.SETTINGS.allow_excess_precision = value


def _functions() -> dict[str, object]:
    def is_available() -> bool:
        return True

    def is_initialized() -> bool:
        return _initialized

    def _lazy_init() -> None:
        global _initialized
        _initialized = True

    def _is_in_bad_fork() -> bool:
        return False

    def device_count() -> int:
        return 1

    def current_device() -> int:
        return 0

    def set_device(device) -> None:
        _index(device)

    class device:  # noqa: N801 - the torch.cuda.device spelling
        """Context manager selecting a device; only ``tpu:0`` exists in this process."""

        def __init__(self, device) -> None:
            self.idx = _index(device)

        def __enter__(self):
            return self

        def __exit__(self, *exc: object) -> bool:
            return False

    class device_of(device):  # noqa: N801
        def __init__(self, obj) -> None:
            super().__init__(obj.get_device() if obj.device.type == "tpu" else None)

    def get_device_name(device=None) -> str:
        _index(device)
        return chip().name

    def get_device_properties(device=None) -> _TpuDeviceProperties:
        _index(device)
        return _TpuDeviceProperties(chip().name, chip().capacity, 1)

    def get_amp_supported_dtype() -> list[torch.dtype]:
        return [torch.bfloat16, torch.float16]

    def is_bf16_supported(including_emulation: bool = True) -> bool:
        return True

    def synchronize(device=None) -> None:
        _index(device)

    def manual_seed(seed) -> None:
        default_generator.manual_seed(int(seed))

    def manual_seed_all(seed) -> None:
        default_generator.manual_seed(int(seed))

    def seed() -> None:
        default_generator.seed()

    def seed_all() -> None:
        default_generator.seed()

    def initial_seed() -> int:
        return default_generator.initial_seed()

    def get_rng_state(device="tpu") -> torch.Tensor:
        _index(device)
        return default_generator.get_state()

    def set_rng_state(new_state: torch.Tensor, device="tpu") -> None:
        _index(device)
        default_generator.set_state(new_state)

    def get_rng_state_all() -> list[torch.Tensor]:
        return [default_generator.get_state()]

    def set_rng_state_all(new_states) -> None:
        default_generator.set_state(new_states[0])

    def topology_aware_mesh(mesh_shape=None, mesh_dim_names=None):
        """A DeviceMesh over the chips of the process group, laid out by the topology."""
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            topo = chip().topology
            raise RuntimeError(
                "topology_aware_mesh needs torch.distributed initialised with one process per "
                f"chip (the simulated {topo.name} has {topo.devices}); in this single process "
                "there is only tpu:0."
            )
        from torch.distributed.device_mesh import init_device_mesh

        shape = tuple(mesh_shape) if mesh_shape is not None else (dist.get_world_size(),)
        names = tuple(mesh_dim_names) if mesh_dim_names is not None else None
        return init_device_mesh("tpu", shape, mesh_dim_names=names)

    # Memory (torch.cuda-style names, used by accelerate and transformers).
    def memory_allocated(device=None) -> int:
        _index(device)
        return chip().stats().live

    def max_memory_allocated(device=None) -> int:
        _index(device)
        return chip().stats().peak

    def reset_peak_memory_stats(device=None) -> None:
        _index(device)
        chip().reset_peak()

    def mem_get_info(device=None) -> tuple[int, int]:
        _index(device)
        stats = chip().stats()
        return stats.free, stats.capacity

    def memory_stats(device=None) -> dict[str, int]:
        _index(device)
        s = chip().stats()
        return {
            "allocated_bytes.all.current": s.live,
            "allocated_bytes.all.peak": s.peak,
            "num_alloc_retries": 0,
            "num_ooms": s.ooms,
            "allocation.all.allocated": s.allocations,
        }

    def empty_cache() -> None:
        """Nothing is cached: a freed tensor's HBM is returned at once."""

    def _hbm_usage_summary(device=None) -> str:
        _index(device)
        s = chip().stats()
        return (
            f"tpu:0 {chip().name}: {format_bytes(s.live)} / {format_bytes(s.capacity)} HBM in use "
            f"({100 * s.live / s.capacity:.1f}%), peak {format_bytes(s.peak)}"
        )

    return {k: v for k, v in locals().items() if callable(v) and not k.startswith("__")}


class _NotSimulated(types.ModuleType):
    """A TorchTPU submodule whose functions need real hardware."""

    def __init__(self, name: str, available: tuple[str, ...]) -> None:
        super().__init__(f"torch.tpu.{name}")
        self.__all__ = list(available)

    def __getattr__(self, attr: str):
        if attr.startswith("__"):
            raise AttributeError(attr)
        raise NotSimulatedError(
            f"{self.__name__}.{attr} runs only on a real TPU with TorchTPU "
            "(pip install 'tpu-lab[tpu]' on a TPU VM); the bundled device does not simulate it."
        )


@contextmanager
def _custom_compiler_options(**options):
    """Accepted and ignored: the bundled device has no XLA compiler to pass them to."""
    yield options


def _submodules() -> dict[str, types.ModuleType]:
    compiler = types.ModuleType("torch.tpu.compiler")
    compiler.custom_compiler_options = _custom_compiler_options
    return {
        "compiler": compiler,
        "distributed": _NotSimulated(
            "distributed",
            (
                "set_tpu_launch_env",
                "spmd_safe",
                "topology_aware_mesh",
                "window_num_stripes",
                "window_stripe_chunk_mb",
            ),
        ),
        "ops": _NotSimulated(
            "ops", ("splash_sdpa", "ragged_dot", "all_gather_dim", "reduce_scatter_dim")
        ),
        "optimizers": _NotSimulated(
            "optimizers", ("AdamW", "Muon", "Optimizer", "Sgd", "SingleTraceTrainer")
        ),
        "pallas": _NotSimulated("pallas", ()),
        "profiler": _NotSimulated("profiler", ("TpuProfilerConfig",)),
    }


def build() -> _TpuModule:
    """A fresh ``torch.tpu`` module object for the bundled device."""
    module = _TpuModule("torch.tpu", "torch.tpu on tpu_lab's bundled (simulated) device.")
    for name, fn in _functions().items():
        setattr(module, name, fn)
    module.EagerMode = modes.EagerMode
    module.Precision = modes.Precision
    module.set_eager_mode = modes.set_eager_mode
    module.Stream = streams.Stream
    module.Event = streams.Event
    module.stream = streams.stream
    module.set_stream = streams.set_stream
    module.current_stream = streams.current_stream
    module.default_stream = streams.default_stream
    module.default_generators = (default_generator,)
    module.simulated = True
    for name, sub in _submodules().items():
        setattr(module, name, sub)
        sys.modules[f"torch.tpu.{name}"] = sub
    return module
