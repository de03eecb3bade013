"""``torch.tpu`` on the bundled device: every TorchTPU public name, with its semantics."""

from __future__ import annotations

import pytest
import torch

import tpu_lab
from tpu_lab.errors import NotSimulatedError

# torch_tpu/_internal/public_api.py (torch-tpu 0.2.0): the 30 public names of torch.tpu
PUBLIC_NAMES = (
    "EagerMode Event Precision Stream allow_excess_precision current_device current_stream "
    "default_generators default_stream device device_count device_of eager_mode "
    "get_amp_supported_dtype get_device_name get_device_properties get_rng_state initial_seed "
    "is_available is_initialized manual_seed manual_seed_all precision set_device "
    "set_eager_mode set_rng_state set_stream stream synchronize topology_aware_mesh"
).split()
PRIVATE_NAMES = ("_hbm_usage_summary", "memory_allocated", "max_memory_allocated", "empty_cache")
SUBMODULES = ("compiler", "distributed", "ops", "optimizers", "pallas", "profiler")


def test_every_public_name_exists():
    assert len(PUBLIC_NAMES) == 30
    missing = [n for n in PUBLIC_NAMES if not hasattr(torch.tpu, n)]
    assert missing == []
    for sub in SUBMODULES:
        assert hasattr(torch.tpu, sub)


def test_device_queries():
    assert torch.tpu.is_available() and torch.tpu.device_count() == 1
    assert torch.tpu.current_device() == 0
    assert torch.tpu.get_device_name() == "TPU v6e (simulated)"
    props = torch.tpu.get_device_properties(0)
    assert (props.name, props.total_memory) == ("TPU v6e (simulated)", 32 << 30)
    assert torch.tpu.get_amp_supported_dtype() == [torch.bfloat16, torch.float16]
    torch.tpu.set_device(0)
    with torch.tpu.device("tpu:0"):
        pass
    x = torch.ones(1, device="tpu")
    with torch.tpu.device_of(x) as d:
        assert d.idx == 0
    torch.tpu.synchronize()
    assert torch.tpu.is_initialized() in (True, False)


def test_only_tpu0_exists_in_a_process():
    with pytest.raises(RuntimeError, match="each process drives one chip, always tpu:0"):
        torch.tpu.set_device(1)


def test_accelerator_and_transformers_see_tpu():
    assert torch.accelerator.current_accelerator().type == "tpu"
    assert torch.accelerator.is_available()
    from transformers.utils import is_torch_tpu_available

    assert is_torch_tpu_available()


def test_eager_mode_property_and_context_manager_restore_on_exceptions():
    E = torch.tpu.EagerMode
    assert set(E.__members__) == {
        "DEFER_NEVER",
        "DEFER_NEVER_AND_LAUNCH_BLOCKING",
        "DEFER_AND_FUSE",
    }
    assert torch.tpu.eager_mode is E.DEFER_NEVER
    with pytest.raises(KeyError), torch.tpu.set_eager_mode(E.DEFER_AND_FUSE):
        assert torch.tpu.eager_mode is E.DEFER_AND_FUSE
        raise KeyError("boom")
    assert torch.tpu.eager_mode is E.DEFER_NEVER
    torch.tpu.eager_mode = E.DEFER_NEVER_AND_LAUNCH_BLOCKING
    try:
        assert torch.tpu.eager_mode is E.DEFER_NEVER_AND_LAUNCH_BLOCKING
    finally:
        torch.tpu.eager_mode = E.DEFER_NEVER
    with pytest.raises(ValueError, match="Unknown eager mode 'fast'; use one of"):
        torch.tpu.eager_mode = "fast"
    assert torch.tpu.eager_mode is E.DEFER_NEVER


def test_precision_settings():
    before = torch.tpu.precision
    torch.tpu.precision = "high"
    assert torch.tpu.precision is torch.tpu.Precision.HIGH
    torch.tpu.precision = before
    with pytest.raises(TypeError, match="allow_excess_precision must be True or False"):
        torch.tpu.allow_excess_precision = "yes"


def test_streams_and_events():
    s = torch.tpu.Stream()
    with torch.tpu.stream(s):
        assert torch.tpu.current_stream() is s
    assert torch.tpu.current_stream() is torch.tpu.default_stream()
    start, end = torch.tpu.Event(enable_timing=True), torch.tpu.Event(enable_timing=True)
    start.record()
    (torch.ones(64, 64, device="tpu") @ torch.ones(64, 64, device="tpu")).sum().item()
    end.record()
    end.synchronize()
    assert start.elapsed_time(end) >= 0.0 and s.query()
    with pytest.raises(RuntimeError, match="enable_timing=True"):
        torch.tpu.Event().elapsed_time(end)


def test_rng_names():
    torch.tpu.manual_seed_all(3)
    assert torch.tpu.initial_seed() == 3
    assert torch.tpu.default_generators[0].initial_seed() == 3


def test_topology_aware_mesh_needs_one_process_per_chip():
    with pytest.raises(RuntimeError, match="needs torch.distributed initialised"):
        torch.tpu.topology_aware_mesh()


def test_memory_and_private_names():
    for name in PRIVATE_NAMES:
        assert callable(getattr(torch.tpu, name))
    assert torch.tpu._hbm_usage_summary().startswith("tpu:0 TPU v6e (simulated): ")


def test_hardware_only_submodules_say_so():
    with pytest.raises(NotSimulatedError, match="torch.tpu.ops.splash_sdpa runs only on a real"):
        torch.tpu.ops.splash_sdpa
    with torch.tpu.compiler.custom_compiler_options(xla_flag=1) as options:
        assert options == {"xla_flag": 1}


def test_device_names_per_generation():
    try:
        for topo, name, hbm in (
            ("v4-8", "TPU v4", 32),
            ("v5p-2", "TPU v5p", 95),
            ("v7-8", "TPU v7", 96),
        ):
            tpu_lab.use_topology(topo)
            assert torch.tpu.get_device_name() == f"{name} (simulated)"
            assert torch.tpu.get_device_properties().total_memory == hbm << 30
    finally:
        tpu_lab.use_topology("v6e-1")
