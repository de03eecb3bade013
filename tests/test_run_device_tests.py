"""scripts/run_device_tests.py: how the CPU and "tpu" twins of device-generic tests are paired,
counted and grouped by cause, on recorded outcomes and on small device-generic test files
written here (no PyTorch checkout needed)."""

import importlib.util
import sys
import textwrap
from pathlib import Path

import pytest

_SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"


def _load(name):
    spec = importlib.util.spec_from_file_location(name, _SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


suites = _load("run_torch_suites")
device_tests = _load("run_device_tests")
Outcome = suites.Outcome

QUANTIZED = (
    "NotImplementedError: quantized tensors cannot be on the 'tpu' device (flip made one): "
    "TorchTPU has no quantized kernels."
)

# Records as run_torch_suites' plugin writes them, from a run of test_shape_ops.py (shortened).
RECORDED = [
    ("TestShapeOpsCPU::test_flip_cpu_float32", "call", "passed", ""),
    ("TestShapeOpsPRIVATEUSE1::test_flip_tpu_float32", "call", "failed", QUANTIZED),
    ("TestShapeOpsCPU::test_flip_cpu_int64", "call", "passed", ""),
    ("TestShapeOpsPRIVATEUSE1::test_flip_tpu_int64", "call", "passed", ""),
    ("TestShapeOpsCPU::test_unbind_cpu", "call", "passed", ""),
    ("TestShapeOpsPRIVATEUSE1::test_unbind_tpu", "setup", "skipped", "Only runs on cpu"),
    ("TestShapeOpsCPU::test_rot90_cpu", "call", "failed", "IndexError: Dimension out of range"),
    ("TestShapeOpsPRIVATEUSE1::test_rot90_tpu", "call", "failed", "IndexError: Dimension"),
    ("TestShapeOpsCPU::test_nonzero_cpu_bool", "call", "passed", ""),
    ("TestShapeOpsPRIVATEUSE1::test_nonzero_tpu_bool", "call", "failed", "AssertionError: no"),
    ("TestShapeOpsCPU::test_only_on_cpu_cpu", "call", "passed", ""),
    ("test_helpers_without_a_device", "call", "passed", ""),
]


def recorded_run(rows=RECORDED, returncode=1):
    records = [
        {"id": f"test/test_shape_ops.py::{t}" if "::" in t else t, "when": w, "outcome": o,
         "xfail": False, "message": m}
        for t, w, o, m in rows
    ]  # fmt: skip
    return suites.FileRun(suites.outcomes(records), returncode)


def test_twins_are_keyed_by_the_test_without_its_device():
    key = device_tests.twin_key
    assert key("f.py::TestFooCPU::test_add_cpu_float32") == (
        "f.py::TestFoo::test_add_{device}_float32",
        "cpu",
    )
    assert (
        key("f.py::TestFooPRIVATEUSE1::test_add_tpu_float32")[0]
        == key("f.py::TestFooTPU::test_add_tpu_float32")[0]
    )
    # a name holding "cpu" itself: the device is the last token
    assert key("f.py::TestFooCPU::test_cpu_copy_cpu") == (
        "f.py::TestFoo::test_cpu_copy_{device}",
        "cpu",
    )
    assert key("f.py::TestFoo::test_plain") is None
    assert key("f.py::test_module_level_cpu") is None


def test_a_recorded_run_is_paired_counted_and_grouped_by_cause():
    r = device_tests.report("test/test_shape_ops.py", recorded_run())
    assert (r.paired, r.cpu_passed, r.tpu_passed) == (5, 4, 1)
    assert r.skipped == {"Only runs on cpu": ["TestShapeOps::test_unbind_{device}"]}
    assert r.causes == {
        (QUANTIZED, "quantized tensors: TorchTPU has no quantized kernels"): [
            "TestShapeOps::test_flip_{device}_float32"
        ],
        ("AssertionError: no", None): ["TestShapeOps::test_nonzero_{device}_bool"],
    }
    assert r.unexplained == 1  # the quantized one is shared with TorchTPU
    assert device_tests.render(r) == textwrap.dedent(
        f"""\
        test/test_shape_ops.py: 5 paired, 4 passed on the CPU, 1 of those on 'tpu', 1 skipped there by the test
          1 skipped on 'tpu' by the test: Only runs on cpu
          1 differ, shared with TorchTPU: quantized tensors: TorchTPU has no quantized kernels: {QUANTIZED}
            TestShapeOps::test_flip_{{device}}_float32
          1 differ, UNEXPLAINED: AssertionError: no
            TestShapeOps::test_nonzero_{{device}}_bool"""
    )


def test_an_explanation_can_be_for_some_tests_only():
    # a generic failure is shared with TorchTPU for the tests the explanation names, no others
    rows = [
        ("TestNNDeviceTypeCPU::test_upsamplingBiMode2d_nonsupported_dtypes_mode_bilinear_uint8_"
         "cpu_uint8", "call", "passed", ""),
        ("TestNNDeviceTypePRIVATEUSE1::test_upsamplingBiMode2d_nonsupported_dtypes_mode_bilinear_"
         "uint8_tpu_uint8", "call", "failed", "AssertionError: RuntimeError not raised"),
        ("TestNNDeviceTypeCPU::test_other_cpu", "call", "passed", ""),
        ("TestNNDeviceTypePRIVATEUSE1::test_other_tpu", "call", "failed",
         "AssertionError: RuntimeError not raised"),
    ]  # fmt: skip
    r = device_tests.report("test/test_nn.py", recorded_run(rows))
    assert [why for _, why in r.causes] == [
        None,  # test_other
        "uint8 bilinear/bicubic interpolation: TorchTPU's CheckUpsampleDtypes refuses Int, "
        "Long and Bool only (scripts/read_torchtpu_kernels.py)",
    ]
    assert r.unexplained == 1


def test_the_markdown_table_counts_each_file():
    r = device_tests.report("test/test_shape_ops.py", recorded_run())
    broken = device_tests.report(
        "test/test_nn.py",
        recorded_run([("test/test_nn.py", "collect", "failed", "ImportError: cannot import name "
                       "'TEST_NEW_THING' from 'torch.testing._internal.common_utils'")]),
    )  # fmt: skip
    assert broken.import_error == "missing: TEST_NEW_THING"
    table = device_tests.markdown([r, broken]).splitlines()
    assert table[2] == "| `test/test_shape_ops.py` | 5 | 4 | 1 | 1 | 2 (1 unexplained) |"
    assert table[3] == "| `test/test_nn.py` | - | - | - | - | does not import (missing: TEST_NEW_THING) |"


def test_a_file_that_fails_to_import_for_another_reason_gives_that_error():
    # test_tensor_creation_ops.py uses a bare @skipIfTorchDynamo, which torch 2.13 rejects
    failure = "AssertionError: Are you using skipIfTorchDynamo correctly?"
    broken = device_tests.report(
        "test/test_tensor_creation_ops.py",
        recorded_run([("test/test_tensor_creation_ops.py", "collect", "failed", failure)]),
    )
    assert broken.import_error == failure
    assert device_tests.render(broken) == (
        f"test/test_tensor_creation_ops.py: does not import on this torch ({failure})"
    )


def test_a_run_stopped_by_its_timeout_says_so():
    r = device_tests.report("test/test_shape_ops.py", recorded_run(returncode=None))
    assert device_tests.render(r).splitlines()[0].endswith("(stopped by the timeout)")


# A device-generic test file, instantiated for the CPU and "tpu" by PyTorch's own machinery.
GENERIC_TESTS = """
import torch
from torch.testing._internal.common_device_type import (
    dtypes, instantiate_device_type_tests, onlyCPU)
from torch.testing._internal.common_utils import TestCase, run_tests


SEEN = []


class TestTwins(TestCase):
    def test_once_per_process(self, device):
        SEEN.append(device)
        assert SEEN[0] == device, "ran after its twin"

    @dtypes(torch.float32, torch.int64)
    def test_add(self, device, dtype):
        x = torch.ones(3, device=device, dtype=dtype)
        self.assertEqual((x + x).cpu(), torch.full((3,), 2, dtype=dtype))

    def test_quantize(self, device):
        torch.quantize_per_tensor(torch.ones(2, device=device), 0.1, 5, torch.quint8)

    def test_differs(self, device):
        assert device == "cpu", "only the CPU"

    @onlyCPU
    def test_cpu_only(self, device):
        pass


instantiate_device_type_tests(TestTwins, globals())

if __name__ == "__main__":
    run_tests()
"""


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_a_device_generic_file_runs_with_both_instantiations(tmp_path, capsys):
    pytest.importorskip("expecttest")
    (tmp_path / "test").mkdir()
    (tmp_path / "test" / "test_twins.py").write_text(GENERIC_TESTS)
    (tmp_path / "test" / "test_broken.py").write_text(
        "from torch.testing._internal.common_utils import NOT_IN_THIS_TORCH\n"
    )
    markdown = tmp_path / "table.md"
    code = device_tests.main(
        [str(tmp_path), "test/test_twins.py", "test/test_broken.py", "test/test_absent.py",
         "--markdown", str(markdown)]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert code == 1, out  # test_differs is not explained
    assert (
        "test/test_twins.py: 6 paired, 6 passed on the CPU, 3 of those on 'tpu', 1 skipped" in out
    )
    assert (
        "passed on 'tpu' when run alone (failed after its CPU twin): "
        "TestTwins::test_once_per_process_{device}" in out
    )
    assert "1 differ, UNEXPLAINED: AssertionError: only the CPU" in out
    assert "1 differ, shared with TorchTPU: quantized tensors" in out
    assert "test/test_broken.py: does not import on this torch (missing: NOT_IN_THIS_TORCH)" in out
    assert "test/test_absent.py: not in" in out
    assert "| `test/test_broken.py` | - | - | - | - | does not import (missing: NOT_IN_THIS_TORCH) |" in (
        markdown.read_text()
    )
