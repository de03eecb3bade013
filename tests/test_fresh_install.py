"""The README's two commands, as a new user runs them: a fresh clone of this repository, no
virtual environment yet, ``make run`` and then ``make test`` (on one test file: the whole suite
is what is running this test)."""

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(
    not (ROOT / ".git").exists() or shutil.which("make") is None or shutil.which("git") is None,
    reason="needs a git checkout of tpu_lab, git and make",
)


def _clean_env() -> dict[str, str]:
    """The environment of a new shell: no virtual environment active, no tpu_lab settings."""
    venv = os.environ.get("VIRTUAL_ENV")
    path = [p for p in os.environ["PATH"].split(os.pathsep) if not venv or not p.startswith(venv)]
    inherited = ("TPU_LAB_", "VIRTUAL_ENV", "MAKEFLAGS", "MAKELEVEL", "MFLAGS")  # not a new shell's
    env = {k: v for k, v in os.environ.items() if not k.startswith(inherited)}
    env["PATH"] = os.pathsep.join(path)
    return env


def test_make_run_then_make_test_in_a_fresh_clone(tmp_path):
    clone = tmp_path / "tpu_lab"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
    env = _clean_env()
    run = subprocess.run(
        ["make", "run"], cwd=clone, env=env, capture_output=True, text=True, timeout=1500
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "No problems found." in run.stdout
    assert "same as CPU:   True" in run.stdout
    assert (clone / ".venv" / "bin" / "tpu-lab").exists()

    test = subprocess.run(
        [
            "make", "test", "PYTEST_ARGS=-q -p no:cacheprovider tests/test_cli.py",
        ],  # fmt: skip
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=1500,
    )
    assert test.returncode == 0, test.stdout[-3000:] + test.stderr[-3000:]
    assert "All checks passed!" in test.stdout  # ruff
    assert len(re.findall(r"^\d+ passed", test.stdout, re.M)) == 1, test.stdout[-2000:]
    # pip install compiled the core (hatch_build.py); build-core --if-needed found it current
    assert "up to date (built for torch" in run.stdout and "by pip install in" in run.stdout
