"""What TorchTPU's own tutorials need from tpu-lab (scripts/run_torchtpu_tutorials.py runs them):
the stand-in's ``_internal.device._device_module``, ``_internal.compile``, ``utils.assert_close``
with its value-check modes, ``_internal.sync.sync`` and its computation dump,
``torch.backends.tpu``, the device's uint16/uint32 ops, and the runner's own parsing and report
(on a small tutorial-shaped folder: the real tutorials are TorchTPU's code, kept out of here)."""

import functools
import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import tpu_lab  # noqa: F401 - installs the device and the stand-in's finder

ROOT = Path(__file__).resolve().parents[1]


# --- torch_tpu._internal.device._device_module ----------------------------------------------


def test_device_module_starts_the_device_as_the_tutorials_helper_asks():
    from torch_tpu._internal.device import _device_module

    module = _device_module.DeviceModule
    assert module is _device_module.TpuDeviceModule
    assert _device_module.get_device_module("tpu") is module
    module._init_runtime_options(device_type="tpu")
    assert module.is_initialized() is True
    assert torch.tpu.is_initialized() is True


def test_device_module_refuses_other_device_types_with_the_fix():
    from torch_tpu._internal.device import _device_module

    with pytest.raises(ValueError) as info:
        _device_module.DeviceModule._init_runtime_options(device_type="xla_cpu")
    assert str(info.value) == (
        "device_type 'xla_cpu' is not supported: the bundled device is 'tpu' (TorchTPU's "
        "xla_cpu and xla_cuda types are not simulated)."
    )
    with pytest.raises(ValueError) as info:
        _device_module.get_device_module("cuda")
    assert str(info.value) == "Unsupported device type 'cuda': the bundled device is 'tpu'."


# --- torch_tpu._internal.compile ------------------------------------------------------------


def test_compile_module_registers_the_tpu_backend_and_its_class_compiles_like_the_cpu():
    from torch._dynamo.backends.registry import list_backends
    from torch_tpu._internal import compile as tpu_compile

    assert "tpu" in list_backends()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    x = torch.randn(4, 8)
    expected = model(x)
    compiled = torch.compile(model.to("tpu"), backend=tpu_compile.TpuBackend(), dynamic=False)
    torch.testing.assert_close(compiled(x.to("tpu")).cpu(), expected, rtol=1e-6, atol=1e-6)


def test_tpu_backend_class_refuses_options_and_says_why():
    from torch_tpu._internal.compile import TpuBackend

    with pytest.raises(TypeError) as info:
        TpuBackend()(None, [], mode="max-autotune")
    assert str(info.value) == (
        "TpuBackend got options ['mode']: the bundled device's backend takes none (its XLA "
        'options have no compiler to reach). Call torch.compile(model, backend="tpu") without '
        "options."
    )


# --- utils.assert_close and CheckValueMode ---------------------------------------------------


def _utils():
    from torch_tpu._internal.utils import utils

    return utils


def _passes(fn, *args, **kwargs) -> bool:
    try:
        fn(*args, **kwargs)
    except AssertionError:
        return False
    return True


@pytest.mark.parametrize("seed", range(5))
def test_assert_close_modes_decide_as_their_rules_on_real_tensors(seed):
    """LOOSE is |a-e| <= atol + rtol|e| everywhere, STRICT both |a-e| <= atol and
    |a-e| <= rtol|e| (plus 1e-7): each decision equals the rule computed in float64."""
    utils = _utils()
    g = torch.Generator().manual_seed(seed)
    expected = torch.randn(64, generator=g)
    actual = (expected + 1e-3 * torch.randn(64, generator=g)).to("tpu")
    e64, diff = expected.double(), (actual.cpu().double() - expected.double()).abs()
    strict_mode = utils.CheckValueMode.STRICT
    for rtol, atol in ((1e-2, 1e-3), (1e-1, 1e-4), (0.5, 3e-3), (1.0, 1e-2)):
        loose = bool((diff <= atol + rtol * e64.abs()).all())
        strict = bool((diff <= atol).all() and (diff <= 1e-7 + rtol * e64.abs()).all())
        got = actual.cpu()
        assert _passes(utils.assert_close, got, expected, rtol=rtol, atol=atol) == loose
        assert (
            _passes(
                utils.assert_close, got, expected, rtol=rtol, atol=atol, check_value=strict_mode
            )
            == strict
        )


def test_assert_close_strict_fails_where_loose_passes_and_suggests_tolerances():
    utils = _utils()
    expected = torch.tensor([1.0, 0.001])
    actual = torch.tensor([1.0005, 0.0015])
    utils.assert_close(actual, expected, rtol=1e-3, atol=1e-3)
    with pytest.raises(AssertionError) as info:
        utils.assert_close(
            actual, expected, rtol=1e-3, atol=1e-3, check_value=utils.CheckValueMode.STRICT
        )
    diff = (actual.double() - expected.double()).abs()
    max_abs, max_rel = diff.max().item(), (diff / expected.double()).max().item()
    message = str(info.value)
    assert "(strict relative check failure)" in message
    assert message.endswith(
        "\n\nTolerance Suggestions:\n  Strict check failed.\n  To pass in STRICT mode, you need "
        f"BOTH:\n    - rtol >= {max_rel} (5.0e-01)\n    - atol >= {max_abs} (5.0e-04)"
    )


def test_assert_close_loose_failure_suggests_either_tolerance():
    utils = _utils()
    with pytest.raises(AssertionError) as info:
        utils.assert_close(torch.tensor([2.5]), torch.tensor([2.0]), rtol=0.0, atol=0.1)
    assert str(info.value).endswith(
        "\n\nTolerance Suggestions:\n  Loose check failed.\n  To pass in LOOSE mode, you need "
        "either:\n    - rtol >= 0.25 (2.5e-01) (with atol=0)\n    - OR atol >= 0.5 (5.0e-01) "
        "(with rtol=0)\n    - OR a combination such that atol + rtol * |expected| covers the diffs."
    )


def test_assert_close_strict_lets_negative_zero_match_zero():
    utils = _utils()
    utils.assert_close(
        torch.tensor([-0.0, 1.0]), torch.tensor([0.0, 1.0]), rtol=1e-5, atol=0.0,
        check_value=utils.CheckValueMode.STRICT,
    )  # fmt: skip


def test_assert_close_skip_checks_shape_and_dtype_only():
    utils = _utils()
    skip = utils.CheckValueMode.SKIP
    utils.assert_close(torch.zeros(3), torch.ones(3), check_value=skip)
    with pytest.raises(AssertionError) as info:
        utils.assert_close(torch.zeros(3), torch.zeros(2), check_value=skip)
    assert str(info.value) == (
        "Tensor shape mismatch:\nExpected tensor shape: torch.Size([2])\n"
        "  Actual tensor shape: torch.Size([3])."
    )
    with pytest.raises(AssertionError) as info:
        utils.assert_close(torch.zeros(2), torch.zeros(2, dtype=torch.float64), preamble="layer 3 ")
    assert str(info.value) == (
        "layer 3\nTensor dtype mismatch:\nExpected tensor dtype: torch.float64\n"
        "  Actual tensor dtype: torch.float32."
    )
    utils.assert_close(torch.zeros(2), torch.zeros(2, dtype=torch.float64), check_dtype=False)


def test_assert_close_with_a_tolerance_function_lists_each_mismatch():
    utils = _utils()
    expected = torch.tensor([1.0, 100.0])
    actual = torch.tensor([1.25, 100.5])
    utils.assert_close(actual, expected, atol=lambda e: 0.01 * abs(e) + 0.25)
    with pytest.raises(AssertionError) as info:
        utils.assert_close(actual, expected, atol=lambda e: 0.3)
    assert str(info.value) == (
        "Values are not close at 1 indices:\n"
        "at index (1,), expected=100.0, actual=100.5, diff=0.5, tolerance=0.3"
    )
    with pytest.raises(ValueError, match="rtol must be None if atol is a callable, got rtol=0.1"):
        utils.assert_close(actual, expected, rtol=0.1, atol=lambda e: 0.3)


def test_assert_close_compares_sequences_item_by_item_and_none():
    utils = _utils()
    utils.assert_close([torch.ones(2), torch.zeros(1)], [torch.ones(2), torch.zeros(1)])
    utils.assert_close(None, None)
    with pytest.raises(AssertionError, match="sequences of tensors for comparison must be the "):
        utils.assert_close([torch.ones(1)], [torch.ones(1), torch.ones(1)])
    with pytest.raises(TypeError) as info:
        utils.assert_close(torch.ones(1), torch.ones(1), check_value="strict")
    assert str(info.value) == (
        "check_value must be a CheckValueMode (SKIP, LOOSE or STRICT), got 'strict'."
    )


# --- torch_tpu._internal.sync.sync ------------------------------------------------------------


def test_computation_mlir_shows_the_pending_graph_of_defer_and_fuse_only():
    from torch_tpu._internal import execution_mode as em
    from torch_tpu._internal.sync import sync

    from tpu_lab.device import current

    with em.set_eager_mode(em.EagerMode.DEFER_AND_FUSE):
        torch.accelerator.synchronize()  # a sync point: nothing pending before the ops
        x = torch.ones((2, 2), device="tpu")
        z = (x + 1) * 2
        pending = current().cache.pending()
        mlir = sync.computation_mlir(z)
        assert current().cache.pending() == pending  # reading it is not a sync point
    assert mlir.splitlines() == [
        "// tpu_lab bundled device, eager mode DEFER_AND_FUSE: 3 op(s) recorded since the last "
        "sync point (the device's recording; no StableHLO is generated here)",
        "module @pending_computation {",
        "  %0 = aten.fill_.Scalar(tensor<2x2xf32>, 1.0)  // aten.fill_.Scalar",
        "  %1 = stablehlo.add(tensor<2x2xf32>, 1, 1)  // aten.add.Tensor",
        "  %2 = stablehlo.multiply(tensor<2x2xf32>, 2)  // aten.mul.Tensor",
        "}",
    ]
    with em.set_eager_mode(em.EagerMode.DEFER_NEVER):
        z = (torch.ones((2, 2), device="tpu") + 1) * 2
        assert "stablehlo" not in sync.computation_mlir(z)
    from torch_tpu._internal import sync as package

    assert package.computation_mlir is sync.computation_mlir


def test_dump_computation_mlir_writes_the_same_text(tmp_path):
    from torch_tpu._internal.sync import sync

    x = torch.ones(3, device="tpu")
    path = tmp_path / "dumps" / "graph.mlir"
    sync.dump_computation_mlir([x], str(path))
    assert path.read_text() == sync.computation_mlir(x)


# --- torch.backends.tpu ------------------------------------------------------------------------


def test_torch_backends_tpu_is_the_same_setting_as_torch_tpu():
    import torch.backends.tpu as backends_tpu

    assert backends_tpu is torch.backends.tpu
    before = torch.tpu.allow_excess_precision
    try:
        torch.backends.tpu.allow_excess_precision = True
        assert torch.tpu.allow_excess_precision is True
        torch.tpu.allow_excess_precision = False
        assert torch.backends.tpu.allow_excess_precision is False
        with pytest.raises(TypeError) as info:
            torch.backends.tpu.allow_excess_precision = "no"
        assert str(info.value) == "allow_excess_precision must be True or False, got 'no'."
    finally:
        torch.tpu.allow_excess_precision = before


# --- uint16/uint32 ops the CPU kernels lack ---------------------------------------------------

_U32_VALUES = [0, 1, 2, 3, 7, 255, 65535, 2**31 - 1, 2**31, 4_000_000_000, 2**32 - 1]


def _as(values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``values`` (int64) cast to ``dtype`` on the CPU: the low bits, as a TPU wraps."""
    return values.to(dtype)


@pytest.mark.parametrize("dtype", [torch.uint32, torch.uint16])
def test_unsigned_ops_on_tpu_equal_int64_on_the_cpu_cast_back(dtype):
    bits = 32 if dtype == torch.uint32 else 16
    wide = torch.tensor([v % 2**bits for v in _U32_VALUES], dtype=torch.int64)
    shifts = torch.arange(len(_U32_VALUES), dtype=torch.int64) % bits
    x, s = _as(wide, dtype).to("tpu"), _as(shifts, dtype).to("tpu")
    cases = {
        "arange": (torch.arange(5, 40, 3, dtype=dtype, device="tpu"), torch.arange(5, 40, 3)),
        "pow.Scalar": (2 ** torch.arange(bits, dtype=dtype, device="tpu"), 2 ** torch.arange(bits)),
        "sum(dtype)": (torch.sum(x, dim=0, dtype=dtype), wide.sum(dim=0)),
        "add": (x + x, wide + wide),
        "sub": (x - s, wide - shifts),
        ">>": (x >> s, wide >> shifts),
        "<<": (x << s, wide << shifts),
        ">> 3": (x >> 3, wide >> 3),
        "mul": (x * x, wide * wide),
    }
    for name, (got, want) in cases.items():
        assert got.device.type == "tpu", name
        assert got.dtype == dtype, name
        assert torch.equal(got.cpu(), _as(want, dtype)), name
    inplace = x.clone()
    inplace.add_(s)
    assert torch.equal(inplace.cpu(), _as(wide + shifts, dtype))
    out = torch.empty(0, dtype=dtype, device="tpu")
    torch.arange(4, out=out)
    assert out.shape == (4,) and torch.equal(out.cpu(), _as(torch.arange(4), dtype))


def test_unsigned_results_keep_pytorchs_dtypes_and_other_dtypes_are_untouched():
    x = torch.tensor([1, 2, 3], dtype=torch.uint32)
    assert x.to("tpu").sum(dim=0).dtype == x.sum(dim=0).dtype == torch.int64
    assert (x.to("tpu") == 2).cpu().tolist() == [False, True, False]
    f = torch.randn(16, 16)
    assert torch.equal(f.to("tpu").sum(dim=1).cpu(), f.sum(dim=1))
    assert torch.equal((2.0 ** f.to("tpu")).cpu(), 2.0**f)


def test_uint64_is_not_widened_and_the_cpus_refusal_stands():
    with pytest.raises(NotImplementedError, match="not implemented for 'UInt64'"):
        torch.arange(4, dtype=torch.uint64, device="tpu")


@pytest.mark.parametrize("lowering", ["inductor", "aten"])
def test_compiled_unsigned_ops_equal_the_eager_ones(lowering):
    """In a torch.compile(backend="tpu") graph the same ops wrap as in eager (quant.py's pack)."""
    from tpu_lab.device.compile_backend import lowering as use

    def pack(values):
        bits = (values == 1.0).to(torch.uint32)
        patterns = 2 ** torch.arange(32, dtype=torch.uint32, device=values.device)
        return (bits * patterns) >> 1, patterns << 1

    torch.manual_seed(0)
    values = torch.randn(4, 32).sign().to("tpu")
    wide = (values.cpu() == 1.0).to(torch.int64) * 2 ** torch.arange(32)
    with use(lowering):
        torch.compiler.reset()
        shifted, doubled = torch.compile(pack, backend="tpu")(values)
    assert shifted.dtype == doubled.dtype == torch.uint32
    assert torch.equal(shifted.cpu(), (wide >> 1).to(torch.uint32))
    assert torch.equal(doubled.cpu(), (2 ** torch.arange(32) << 1).to(torch.uint32))
    torch.compiler.reset()


@pytest.mark.parametrize("lowering", ["inductor", "aten"])
def test_compiled_unsigned_reductions_equal_the_eager_ones(lowering):
    """The quantization tutorial's sums of packed bits: under the ATen lowering the CPU refuses
    them ("sum_cpu" not implemented for 'UInt32'); they wrap as in eager."""
    from tpu_lab.device.compile_backend import lowering as use

    def reduce(values):
        bits = (values > 0).to(torch.uint32)
        packed = bits * 2 ** torch.arange(32, dtype=torch.uint32, device=values.device)
        return (
            torch.sum(packed, dim=-1, dtype=torch.uint32),
            packed.amax(dim=-1),
            packed.cumsum(dim=-1, dtype=torch.uint32),
            packed.sum(dim=-1),  # int64, as PyTorch promotes it
        )

    torch.manual_seed(0)
    values = torch.randn(5, 32).to("tpu")
    eager = reduce(values)
    with use(lowering):
        torch.compiler.reset()
        compiled = torch.compile(reduce, backend="tpu")(values)
    wide = (values.cpu() > 0).to(torch.int64) * 2 ** torch.arange(32)
    expected = (wide.sum(-1), wide.amax(-1), wide.cumsum(-1), wide.sum(-1))
    for got, again, want in zip(compiled, eager, expected, strict=True):
        assert got.dtype == again.dtype
        assert torch.equal(got.cpu(), again.cpu())
        assert torch.equal(got.cpu(), want.to(got.dtype))
    torch.compiler.reset()


def test_compiled_float_pow_keeps_its_decomposition_and_the_cpus_numbers():
    x = torch.randn(64)
    torch.compiler.reset()
    got = torch.compile(lambda t: t**2 + 2.0**t, backend="tpu")(x.to("tpu"))
    torch.testing.assert_close(got.cpu(), x**2 + 2.0**x, rtol=1e-6, atol=1e-6)
    torch.compiler.reset()


# --- Pallas kernels under torch.compile, and JAX's own dumps ----------------------------------


def test_jax_op_compiles_in_a_graph_its_fake_needs_no_real_tensor():
    """custom_pallas_kernel.py: a jax_op inside torch.compile(backend="tpu"), and its autograd."""
    jax = pytest.importorskip("jax")
    pl = pytest.importorskip("jax.experimental.pallas")
    from torch_tpu._internal import pallas

    def mul_kernel(x_ref, y_ref, o_ref):
        o_ref[...] = x_ref[...] * y_ref[...]

    def mul(x: jax.Array, y: jax.Array) -> jax.Array:
        return pl.pallas_call(mul_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x, y)

    op = pallas.jax_op("tutorials_test::mul", mul)
    x = torch.tensor([1.0, 2.0, 3.0], device="tpu")
    y = torch.tensor([4.0, 5.0, 6.0], device="tpu")
    torch.compiler.reset()
    got = torch.compile(lambda a, b: op(a, b) + 1, backend="tpu")(x, y)
    assert torch.equal(got.cpu(), torch.tensor([5.0, 11.0, 19.0]))
    torch.compiler.reset()


def test_the_pallas_interpreter_leaves_xla_dump_folders_to_torchtpu(tmp_path):
    """XLA_FLAGS' dump flags are for TorchTPU's XLA: JAX's CPU interpreter writes none there."""
    pytest.importorskip("jax")
    dump = tmp_path / "xla_dump"
    code = textwrap.dedent(
        f"""
        import os
        os.environ["XLA_FLAGS"] = "--xla_dump_to={dump} --xla_dump_hlo_as_text"
        import torch, jax
        from jax.experimental import pallas as pl
        from torch_tpu._internal import pallas

        def double(i_ref, o_ref):
            o_ref[...] = i_ref[...] * 2.0

        def run(x: jax.Array) -> jax.Array:
            return pl.pallas_call(double, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)

        op = pallas.jax_op("dump_test::double", run)
        print(op(torch.ones(3, device="tpu")).cpu().tolist(), os.environ["XLA_FLAGS"])
        """
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == f"[2.0, 2.0, 2.0] --xla_dump_to={dump} --xla_dump_hlo_as_text"
    assert not dump.exists()


# --- scripts/run_torchtpu_tutorials.py --------------------------------------------------------


@functools.cache
def _runner():
    spec = importlib.util.spec_from_file_location(
        "run_torchtpu_tutorials", ROOT / "scripts" / "run_torchtpu_tutorials.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_first_error_is_the_exception_line_of_the_last_traceback():
    runner = _runner()
    stderr = textwrap.dedent(
        """\
        Traceback (most recent call last):
          File "a.py", line 3, in <module>
            f()
        KeyError: 'x'

        During handling of the above exception, another exception occurred:

        Traceback (most recent call last):
          File "a.py", line 5, in <module>
            app.run()
          File "a.py", line 9, in _
            import torch_tpu._internal.nope
        ModuleNotFoundError: No module named 'torch_tpu._internal.nope'
        """
    )
    assert runner.first_error(stderr) == (
        "ModuleNotFoundError: No module named 'torch_tpu._internal.nope'"
    )
    assert runner.first_error("warning: nothing went wrong\n") == ""


def _folder(tmp_path: Path) -> Path:
    folder = tmp_path / "notebooks"
    (folder / "tests").mkdir(parents=True)
    (folder / "helper.py").write_text("VALUE = 41\n")
    (folder / "clean_one.py").write_text(
        "import torch\nimport helper\n\nif __name__ == '__main__':\n"
        "    print(torch.ones(2, device='tpu').sum().item() + helper.VALUE)\n"
    )
    (folder / "broken_one.py").write_text(
        "import torch\n\nif __name__ == '__main__':\n    torch.tpu.is_available()\n"
    )
    (folder / "tests" / "test_shaped.py").write_text(
        "import torch\n\n"
        "def test_device(device):\n    assert torch.ones(1, device=device).device.type == 'tpu'\n\n"
        "def test_imports_a_notebook(setup_sys_path):\n    import clean_one  # noqa: F401\n\n"
        "def test_fails(device):\n    assert torch.zeros(1, device=device).item() == 1, 'no'\n"
    )
    return folder


def test_runner_finds_tutorials_by_their_main_block(tmp_path):
    runner = _runner()
    assert [p.name for p in runner.tutorials(_folder(tmp_path))] == [
        "broken_one.py",
        "clean_one.py",
    ]


def test_runner_runs_each_tutorial_and_the_tests_and_prints_the_table(tmp_path):
    folder = _folder(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("TORCH_DEVICE_BACKEND_AUTOLOAD", None)
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "run_torchtpu_tutorials.py"), str(folder)],
        capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert lines[0] == (
        f"TorchTPU's tutorials in {folder}, on the bundled device with tpu-lab's stand-in"
    )
    assert lines[1].split() == ["tutorial", "outcome", "seconds", "first", "error"]
    broken, clean = lines[2].split(None, 3), lines[3].split()
    assert broken[:2] == ["broken_one", "failed"]
    assert broken[3].startswith("RuntimeError: is_available is internal to TorchTPU")
    assert clean[:2] == ["clean_one", "clean"] and len(clean) == 3
    assert lines[4:] == [
        "1 of 2 tutorials ran clean",
        "tests: 2 passed, 1 failed (of 3)",
        "  failed: test_shaped.py::test_fails: AssertionError: no",
    ]
    assert not (folder / ".pytest_cache").exists()


def test_runner_refuses_a_folder_without_tutorials(tmp_path):
    runner = _runner()
    empty = tmp_path / "empty"
    empty.mkdir()
    assert runner.preflight(empty, []) == (
        f"{empty} holds no tutorials (*.py with a __main__ block) and no tests/ folder."
    )
