"""scripts/run_torch_suites.py: how PyTorch's test files are run with and without tpu-lab, and how
their outcomes are compared, on small test files written here (no PyTorch checkout needed)."""

import importlib.util
import sys
import textwrap
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location(
    "run_torch_suites", Path(__file__).resolve().parent.parent / "scripts" / "run_torch_suites.py"
)
suites = importlib.util.module_from_spec(_spec)
sys.modules["run_torch_suites"] = suites
_spec.loader.exec_module(suites)
Outcome = suites.Outcome

# A test file whose tests end differently depending on the environment variable SIDE.
SIDE_TESTS = '''
import os

import pytest

SIDE = os.environ["SIDE"]


def test_same():
    assert True


def test_passes_only_without():
    assert SIDE == "without", "changed by the package"


def test_fails_both_ways_for_different_reasons():
    raise ValueError(f"{SIDE} at 0x{id(SIDE):x}")


def test_fails_both_ways_alike():
    raise ValueError("at 0x7f00aa")


@pytest.mark.skipif(SIDE == "with", reason="not here")
def test_skipped_only_with():
    pass


@pytest.mark.xfail(reason="known")
def test_xfail():
    assert SIDE == "with"


@pytest.fixture
def broken():
    raise RuntimeError("fixture")


def test_setup_error(broken):
    pass
'''


def _run(tmp_path, side, name="test/test_side.py", source=SIDE_TESTS, timeout=120):
    folder = tmp_path / "pytorch"
    (folder / name).parent.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(textwrap.dedent(source))
    label = suites.WITH if side == "with" else suites.WITHOUT
    log, cache = tmp_path / f"{side}.jsonl", tmp_path / f"{side}-cache"
    env = suites.child_env(label, log, cache)
    env["SIDE"] = side
    return suites.run_file(sys.executable, folder, name, env, log, timeout)


@pytest.fixture(scope="module")
def both_runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("suites")
    return _run(tmp, "with"), _run(tmp, "without")


def test_each_test_gets_one_outcome(both_runs):
    with_lab, without = both_runs
    prefix = "test/test_side.py::"
    assert with_lab.returncode == 1
    assert without.results == {
        prefix + "test_same": Outcome("passed"),
        prefix + "test_passes_only_without": Outcome("passed"),
        prefix + "test_fails_both_ways_for_different_reasons": Outcome(
            "failed", "ValueError: without at 0x…"
        ),
        prefix + "test_fails_both_ways_alike": Outcome("failed", "ValueError: at 0x…"),
        prefix + "test_skipped_only_with": Outcome("passed"),
        prefix + "test_xfail": Outcome("xfailed", "known"),
        prefix + "test_setup_error": Outcome("error", "RuntimeError: fixture"),
    }
    assert with_lab.results[prefix + "test_skipped_only_with"] == Outcome("skipped", "Skipped: not here")
    assert with_lab.results[prefix + "test_xfail"] == Outcome("xpassed")


def test_the_report_shows_counts_and_every_difference(both_runs):
    text, differ = suites.render("test/test_side.py", *both_runs)
    assert differ == 4
    assert text == textwrap.dedent("""\
        test/test_side.py
          with tpu-lab:    1 passed, 3 failed, 1 error, 1 skipped, 1 xpassed
          without tpu-lab: 3 passed, 2 failed, 1 error, 1 xfailed
          differs: test/test_side.py::test_fails_both_ways_for_different_reasons
            with tpu-lab:    failed (ValueError: with at 0x…)
            without tpu-lab: failed (ValueError: without at 0x…)
          differs: test/test_side.py::test_passes_only_without
            with tpu-lab:    failed (AssertionError: changed by the package)
            without tpu-lab: passed
          differs: test/test_side.py::test_skipped_only_with
            with tpu-lab:    skipped (Skipped: not here)
            without tpu-lab: passed
          differs: test/test_side.py::test_xfail
            with tpu-lab:    xpassed
            without tpu-lab: xfailed (known)""")


def test_a_file_that_does_not_import_is_an_error_not_a_silence(tmp_path):
    run = _run(tmp_path, "without", source="import not_a_module_anywhere\n")
    assert run.results == {
        "test/test_side.py": Outcome(
            "error", "ModuleNotFoundError: No module named 'not_a_module_anywhere'"
        )
    }
    text, differ = suites.render("test/test_side.py", run, suites.FileRun({}, 0))
    assert differ == 1
    assert "    with tpu-lab:    error (ModuleNotFoundError: No module named" in text
    assert text.endswith("    without tpu-lab: not run")


def test_a_run_stopped_by_its_timeout_keeps_what_it_finished(tmp_path):
    source = "import time\n\ndef test_a():\n    pass\n\ndef test_b():\n    time.sleep(600)\n"
    run = _run(tmp_path, "with", source=source, timeout=30)
    assert run.returncode is None
    assert run.results == {"test/test_side.py::test_a": Outcome("passed")}
    text, _ = suites.render("test/test_side.py", run, run)
    assert text.splitlines()[1] == "  with tpu-lab:    1 passed  (stopped by the timeout)"


def test_the_environments_differ_only_in_tpu_lab():
    base = {
        "PATH": "/bin",
        "PYTHONPATH": "/src/tpu_lab_checkout",
        "TORCH_DEVICE_BACKEND_AUTOLOAD": "0",
        "TPU_LAB_CORE": "python",
        "HOME": "/home/u",
    }
    log, cache = Path("/w/log.jsonl"), Path("/w/cache")
    with_lab = suites.child_env(suites.WITH, log, cache, base)
    without = suites.child_env(suites.WITHOUT, log, cache, base)
    assert with_lab == {
        "PATH": "/bin",
        "HOME": "/home/u",
        "PYTHONPATH": f"{suites.HERE}:/src/tpu_lab_checkout",
        "TORCH_SUITES_LOG": "/w/log.jsonl",
        "TORCHINDUCTOR_CACHE_DIR": "/w/cache",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    assert without == {**with_lab, "PYTHONPATH": str(suites.HERE)}


def test_outcomes_fold_the_phases_of_a_test():
    records = [
        {"id": "a", "when": "setup", "outcome": "passed"},
        {"id": "a", "when": "call", "outcome": "passed"},
        {"id": "a", "when": "teardown", "outcome": "failed", "message": "\n  OSError: x\nmore"},
        {"id": "b", "when": "call", "outcome": "failed", "message": "E1"},
        {"id": "b", "when": "teardown", "outcome": "failed", "message": "E2"},
    ]
    assert suites.outcomes(records) == {
        "a": Outcome("error", "OSError: x"),
        "b": Outcome("failed", "E1"),
    }


def test_differences_treat_a_missing_test_as_not_run():
    assert suites.differences({"t": Outcome("passed")}, {}) == ["t"]
    assert suites.differences({"t": Outcome("skipped", "a")}, {"t": Outcome("skipped", "b")}) == []


def test_the_default_files_are_documented():
    for file in suites.DEFAULT_FILES:
        assert f"``{file}``" in suites.__doc__
