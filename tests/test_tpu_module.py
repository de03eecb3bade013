"""``torch.tpu`` on the bundled device: every TorchTPU 0.2.0 public name, with its semantics."""

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
SUBMODULES = ("compiler", "distributed", "ops", "optimizers", "pallas", "profiler")
# Internal in TorchTPU on torch >= 2.11/2.13: user code must use torch.accelerator instead.
INTERNAL = {
    "is_available": ((), "torch.accelerator.is_available"),
    "device_count": ((), "torch.accelerator.device_count"),
    "current_device": ((), "torch.accelerator.current_device_index"),
    "set_device": ((0,), "torch.accelerator.set_device_index"),
    "device": ((0,), "torch.accelerator.device_index"),
    "synchronize": ((), "torch.accelerator.synchronize"),
    "current_stream": ((), "torch.accelerator.current_stream"),
    "initial_seed": ((), "torch.accelerator.random.initial_seed"),
    "get_rng_state": ((), "torch.accelerator.random.get_rng_state"),
}


def test_every_public_name_exists_and_nothing_more():
    assert len(PUBLIC_NAMES) == 30
    assert [n for n in PUBLIC_NAMES if not hasattr(torch.tpu, n)] == []
    for sub in SUBMODULES:
        assert hasattr(torch.tpu, sub)
    with pytest.raises(AttributeError, match="module 'torch.tpu' has no attribute 'memory_"):
        torch.tpu.memory_allocated  # TorchTPU has no memory API: torch.accelerator has it


@pytest.mark.parametrize("name", sorted(INTERNAL))
def test_internal_device_apis_raise_from_user_code_as_in_torchtpu(name):
    args, prefer = INTERNAL[name]
    with pytest.raises(RuntimeError) as info:
        getattr(torch.tpu, name)(*args)
    assert str(info.value) == (
        f"{name} is internal to TorchTPU and can only be called by the PyTorch framework "
        f"(torch and torch_tpu). Use {prefer} instead."
    )


def test_legacy_env_turns_the_error_into_a_warning(monkeypatch):
    monkeypatch.setenv("TORCH_TPU_ALLOW_LEGACY_DEVICE_APIS", "1")
    with pytest.warns(UserWarning, match="is internal to TorchTPU and may change"):
        assert torch.tpu.device_count() == 1
    assert torch.tpu.is_available()
    torch.tpu.synchronize()


def test_torch_accelerator_is_the_device_api():
    assert torch.accelerator.current_accelerator().type == "tpu"
    assert torch.accelerator.is_available() and torch.accelerator.device_count() == 1
    assert torch.accelerator.current_device_index() == 0
    torch.accelerator.synchronize()
    from transformers.utils import is_torch_tpu_available

    assert is_torch_tpu_available()


def test_device_queries():
    assert torch.tpu.get_device_name() == "TPU v6e (simulated)"
    props = torch.tpu.get_device_properties()
    assert props == type(props)("TPU v6e (simulated)", 32 << 30, 1)
    assert torch.bfloat16 in torch.tpu.get_amp_supported_dtype()
    x = torch.ones(1, device="tpu")
    with torch.tpu.device_of(x) as d:
        assert d.idx == 0
    with torch.tpu.device_of(torch.ones(1)) as d:
        assert d.idx == -1
    assert torch.tpu.is_initialized() in (True, False)


def test_only_tpu0_exists_in_a_process(monkeypatch):
    monkeypatch.setenv("TORCH_TPU_ALLOW_LEGACY_DEVICE_APIS", "1")
    with pytest.raises(ValueError, match="Cannot set TPU device to index 1, current process is"):
        torch.tpu.set_device(1)


def test_eager_mode_property_and_context_manager_restore_on_exceptions():
    E = torch.tpu.EagerMode
    assert {m.name: m.value for m in E} == {
        "DEFER_AND_FUSE": 0,
        "DEFER_NEVER": 1,
        "DEFER_NEVER_AND_LAUNCH_BLOCKING": 2,
        "_INTERNAL_COMPILE_FX_GRAPH": 4,
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


def test_calling_an_eager_mode_fails_as_in_torchtpu_and_names_the_spelling_that_works():
    """``with em.eager_mode(em.EagerMode.DEFER_NEVER):`` (a TorchTPU tutorial's spelling) fails
    in torch-tpu 0.2.0 with this TypeError (compared in test_torchtpu_contract): so here."""
    import importlib

    execution_mode = importlib.import_module("torch_tpu._internal.execution_mode")  # stand-in
    E = torch.tpu.EagerMode
    for module in (torch.tpu, execution_mode):
        with (
            pytest.raises(
                TypeError,
                match=r"^'EagerMode' object is not callable\. .*write `with torch\.tpu\."
                r"set_eager_mode\(torch\.tpu\.EagerMode\.DEFER_AND_FUSE\):` for a block",
            ),
            module.eager_mode(E.DEFER_AND_FUSE),
        ):
            pass
    assert torch.tpu.eager_mode is E.DEFER_NEVER
    switch = r"`torch\.tpu\.eager_mode = torch\.tpu\.EagerMode\.DEFER_NEVER`"
    with pytest.raises(TypeError, match=switch):
        E.DEFER_NEVER()


def test_eager_mode_cannot_change_inside_torch_compile():
    @torch.compile(backend="eager", fullgraph=True)
    def f(x):
        with torch.tpu.set_eager_mode(torch.tpu.EagerMode.DEFER_AND_FUSE):
            return x + 1

    with pytest.raises(Exception, match="A compiled graph cannot select how to dispatch eager"):
        f(torch.ones(2))


def test_precision_is_a_context_manager():
    P = torch.tpu.Precision
    assert [(p.name, p.value) for p in P] == [("DEFAULT", 0), ("HIGH", 1), ("HIGHEST", 2)]
    with torch.tpu.precision(P.HIGHEST):
        pass
    with (
        pytest.raises(ValueError, match="expected to be one of 'PrecisionConfig.DEFAULT'"),
        torch.tpu.precision("fast"),
    ):
        pass
    assert torch.tpu.allow_excess_precision is False
    with pytest.raises(TypeError, match="allow_excess_precision must be True or False"):
        torch.tpu.allow_excess_precision = "yes"


def test_allow_excess_precision_comes_from_xla_flags_on_first_use(monkeypatch):
    """TorchTPU: False unless XLA_FLAGS sets XLA's flag; parsed once, on first use."""
    from tpu_lab.device import current

    monkeypatch.setattr(current(), "_excess", None)
    monkeypatch.setenv("XLA_FLAGS", "--xla_dump_to=/tmp/x --xla_allow_excess_precision=true")
    assert torch.tpu.allow_excess_precision is True
    monkeypatch.setenv("XLA_FLAGS", "--xla_allow_excess_precision=false")
    assert torch.tpu.allow_excess_precision is True  # already read
    for flags, value in (("--xla_allow_excess_precision=0", False), ("", False),
                         ("--xla_allow_excess_precision", True)):  # fmt: skip
        monkeypatch.setattr(current(), "_excess", None)
        monkeypatch.setenv("XLA_FLAGS", flags)
        assert torch.tpu.allow_excess_precision is value
    monkeypatch.setattr(current(), "_excess", None)
    monkeypatch.setenv("XLA_FLAGS", "--xla_allow_excess_precision=yes")
    with pytest.raises(ValueError, match="--xla_allow_excess_precision takes true or false"):
        torch.tpu.allow_excess_precision  # noqa: B018


def test_streams_and_events():
    s = torch.tpu.Stream()
    with torch.tpu.stream(s):
        pass
    assert repr(s) == "<torch.tpu.TpuStream>"
    with pytest.raises(NotImplementedError, match="Streams and Events are not fully implemented"):
        s.query()
    start, end = torch.tpu.Event(enable_timing=True), torch.tpu.Event(enable_timing=True)
    start.record()
    (torch.ones(64, 64, device="tpu") @ torch.ones(64, 64, device="tpu")).sum().item()
    end.record(s)
    end.synchronize()
    assert start.elapsed_time(end) >= 0.0 and end.query()
    with pytest.raises(TypeError, match="expected torch.Stream, but got int"):
        end.record(3)
    with pytest.raises(RuntimeError, match="enable_timing=True"):
        torch.tpu.Event().elapsed_time(end)


def test_rng_names():
    torch.tpu.manual_seed_all(3)
    assert torch.tpu.default_generators[0].initial_seed() == 3
    state = torch.tpu.default_generators[0].get_state()
    a = torch.rand(3, device="tpu")
    torch.tpu.set_rng_state(state)
    assert torch.equal(a.cpu(), torch.rand(3, device="tpu").cpu())
    with pytest.raises(ValueError, match="expected device type 'tpu' for RNG state access"):
        torch.tpu.set_rng_state(state, "cpu")


def test_topology_aware_mesh():
    tpu_lab.use_topology("v6e-4")
    try:
        with pytest.warns(DeprecationWarning, match="topology_aware_mesh is deprecated"):
            mesh = torch.tpu.topology_aware_mesh((2, 2))
        assert mesh.tolist() == [[0, 1], [2, 3]]
        assert torch.tpu.distributed.topology_aware_mesh((4,)).tolist() == [0, 1, 2, 3]
        with pytest.raises(ValueError, match=r"mesh_shape \(8,\) has 8 devices but the simulated"):
            torch.tpu.distributed.topology_aware_mesh((8,))
    finally:
        tpu_lab.use_topology("v6e-1")


def test_hbm_usage_summary_has_torchtpus_format():
    assert torch.tpu._hbm_usage_summary().startswith("CompilationCache HBM usage: 0B for ")


def test_hardware_only_submodules_say_so():
    with pytest.raises(NotSimulatedError, match="torch.tpu.ops.splash_sdpa runs only on a real"):
        torch.tpu.ops.splash_sdpa
    with pytest.raises(AttributeError):
        torch.tpu.ops.no_such_op
    with torch.tpu.compiler.custom_compiler_options({"xla_flag": "1"}):
        pass


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


def test_torch_tpu_synchronize_is_a_sync_point_as_torch_accelerator_synchronize(monkeypatch):
    from tpu_lab.events import log

    monkeypatch.setenv("TORCH_TPU_ALLOW_LEGACY_DEVICE_APIS", "1")  # called here from user code
    x = torch.ones(3, device="tpu")
    seen = []
    for synchronize in (torch.tpu.synchronize, torch.accelerator.synchronize):
        seq = log.last_seq()
        with torch.tpu.set_eager_mode(torch.tpu.EagerMode.DEFER_AND_FUSE):
            requests = torch.tpu._get_cache_requests()
            y = x * 2 + 1  # recorded, pending until a sync point
            synchronize()  # ends the graph: one cache request
            assert torch.tpu._get_cache_requests() == requests + 1
        seen.append([(e.kind, e.details.get("reason")) for e in log.since(seq, ("sync",))])
        del y
    assert seen[0] == seen[1] == [("sync", "synchronize")]
