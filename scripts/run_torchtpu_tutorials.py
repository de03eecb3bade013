"""Run TorchTPU's own tutorials and their tests on the bundled device, as a new user would.

    python scripts/run_torchtpu_tutorials.py FOLDER [--only NAME ...] [--timeout S] [--no-tests]

FOLDER holds TorchTPU's tutorial notebooks as published in its repository (``docs/notebooks``:
the marimo notebooks, their helper ``tpu_utils.py`` and their tests in ``tests/test_*.py``),
saved by the user *outside* this repository: they are TorchTPU's code, not tpu-lab's
(docs/torchtpu-tutorials.md lists the files and commits used). The notebooks need ``marimo``
(``pip install marimo``), as TorchTPU's own instructions say.

Each tutorial (a ``.py`` file with a ``__main__`` block; other files, like ``tpu_utils.py``,
are helpers) runs as ``python TUTORIAL.py`` in FOLDER, in a fresh process: marimo runs every
cell in order and stops at the first exception. Nothing imports tpu_lab: PyTorch's device-
backend autoload makes "tpu" the bundled device at ``import torch``, and ``import torch_tpu``
finds tpu-lab's stand-in. Before anything runs, the script checks in that same Python that
``torch_tpu`` *is* the stand-in (a real torch-tpu installation would be used instead, and the
results would say nothing about tpu-lab).

The tests run with pytest in one process, with this module loaded as a pytest plugin (``-p``):
TorchTPU does not publish the ``conftest.py`` that gives its tests their fixtures, so the two
they use are defined here: ``device`` (``torch.device("tpu")``, as the newest tutorials get
it) and ``setup_sys_path`` (FOLDER on ``sys.path``, so that a test can import a notebook).

The report: one row per tutorial (outcome, seconds, first error: the exception line of the
last traceback), then the tests passed and failed, with each failure's first error line.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
FOLDER_ENV = "TORCHTPU_TUTORIALS"  # set for the pytest child: the folder its fixtures use

# --------------------------------------------------------------------------------------------
# pytest plugin (this module, loaded in the child with `-p run_torchtpu_tutorials`)


@pytest.fixture
def device():
    """The device TorchTPU's tests run on: ``torch.device("tpu")``."""
    import torch

    return torch.device("tpu")


@pytest.fixture
def setup_sys_path():
    """The tutorials' folder on ``sys.path``, so that a test can import a notebook."""
    folder = os.environ[FOLDER_ENV]
    sys.path.insert(0, folder)
    yield folder
    sys.path.remove(folder)


# --------------------------------------------------------------------------------------------

_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(: |$)")


def first_error(stderr: str) -> str:
    """The exception line of the last traceback in ``stderr`` ('' when there is none)."""
    lines = stderr.splitlines()
    starts = [i for i, ln in enumerate(lines) if ln.startswith("Traceback (most recent call")]
    if not starts:
        return ""
    for ln in lines[starts[-1] + 1 :]:
        if not ln.startswith((" ", "\t")) and _EXCEPTION_LINE.match(ln):
            return ln.strip()
    return ""


def tutorials(folder: Path) -> list[Path]:
    """The notebooks in ``folder``: its ``.py`` files with a ``__main__`` block, by name."""
    main = re.compile(r"^if __name__ == [\"']__main__[\"']:", re.MULTILINE)
    return sorted(p for p in folder.glob("*.py") if main.search(p.read_text(encoding="utf-8")))


@dataclass(frozen=True)
class TutorialRun:
    name: str
    outcome: str  # "clean", "failed" or "timeout"
    seconds: float
    error: str = ""


def run_tutorial(path: Path, timeout: float) -> TutorialRun:
    start = time.monotonic()
    try:
        proc = subprocess.run(
            [sys.executable, path.name],
            cwd=path.parent,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=_env(),
        )
    except subprocess.TimeoutExpired:
        return TutorialRun(path.stem, "timeout", time.monotonic() - start, f"ran past {timeout}s")
    seconds = time.monotonic() - start
    if proc.returncode == 0:
        return TutorialRun(path.stem, "clean", seconds)
    error = first_error(proc.stderr) or f"exit status {proc.returncode}"
    return TutorialRun(path.stem, "failed", seconds, error)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("TORCH_DEVICE_BACKEND_AUTOLOAD", None)  # autoload on, as a new user has it
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def parse_junit(path: Path) -> dict[str, tuple[str, str]]:
    """``{test id: (outcome, first error line)}`` from pytest's junit xml."""
    out: dict[str, tuple[str, str]] = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        test_id = f"{case.get('classname', '').rpartition('.')[2]}.py::{case.get('name')}"
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error"):
                outcome = "failed"
                message = _first_line(child.get("message") or child.text or "")
            elif child.tag == "skipped":
                outcome, message = "skipped", _first_line(child.get("message") or "")
        out[test_id] = (outcome, message)
    return out


def _first_line(text: str) -> str:
    return next((ln.strip() for ln in text.splitlines() if ln.strip()), "")


def run_tests(folder: Path, timeout: float) -> dict[str, tuple[str, str]]:
    with tempfile.TemporaryDirectory(prefix="torchtpu-tests-") as tmp:
        junit = Path(tmp) / "tests.xml"
        env = _env()
        env[FOLDER_ENV] = str(folder)
        env["PYTHONPATH"] = os.pathsep.join(
            [str(HERE), *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])]
        )
        cmd = [
            sys.executable, "-m", "pytest", str(folder / "tests"), "--rootdir", str(folder),
            "-p", "run_torchtpu_tutorials", "-p", "no:cacheprovider", "-q", "--no-header",
            "-rN", "--tb=short", f"--junitxml={junit}", "-o", "junit_family=xunit1",
        ]  # fmt: skip
        try:
            subprocess.run(cmd, cwd=folder, env=env, capture_output=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"(tests)": ("failed", f"pytest ran past {timeout}s")}
        if not junit.exists():
            return {"(tests)": ("failed", "pytest wrote no results")}
        return parse_junit(junit)


def preflight(folder: Path, names: list[Path]) -> str | None:
    """Why the run cannot say anything about tpu-lab, or ``None``."""
    if not (folder / "tests").is_dir() and not names:
        return f"{folder} holds no tutorials (*.py with a __main__ block) and no tests/ folder."
    probe = (
        "import importlib.util, torch\n"
        "spec = importlib.util.find_spec('torch_tpu')\n"
        "import torch_tpu\n"
        "print(bool(getattr(torch_tpu, '__tpu_lab_standin__', False)), spec.origin)\n"
        "print(importlib.util.find_spec('marimo') is not None)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=_env(), cwd=folder
    )
    if proc.returncode != 0:
        return (
            f"{sys.executable} cannot import torch_tpu ({first_error(proc.stderr)}): install "
            "tpu-lab in this Python (its stand-in answers `import torch_tpu`) and run again."
        )
    standin_line, marimo_line = proc.stdout.splitlines()[-2:]
    if not standin_line.startswith("True"):
        return (
            f"torch_tpu in {sys.executable} is not tpu-lab's stand-in but "
            f"{standin_line.split(' ', 1)[1]}: run this in an environment without torch-tpu."
        )
    needs_marimo = any("import marimo" in p.read_text(encoding="utf-8") for p in names)
    if needs_marimo and marimo_line != "True":
        return f"The tutorials are marimo notebooks: pip install marimo into {sys.executable}."
    return None


def render(folder: Path, runs: list[TutorialRun], tests: dict[str, tuple[str, str]] | None):
    print(f"TorchTPU's tutorials in {folder}, on the bundled device with tpu-lab's stand-in")
    width = max([len("tutorial"), *(len(r.name) for r in runs)])
    print(f"{'tutorial':<{width}}  {'outcome':<7}  {'seconds':>7}  first error")
    for r in runs:
        print(f"{r.name:<{width}}  {r.outcome:<7}  {r.seconds:7.1f}  {_cut(r.error)}")
    clean = sum(r.outcome == "clean" for r in runs)
    print(f"{clean} of {len(runs)} tutorials ran clean")
    if tests is None:
        return
    counts = {o: sum(v[0] == o for v in tests.values()) for o in ("passed", "failed", "skipped")}
    skipped = f", {counts['skipped']} skipped" if counts["skipped"] else ""
    print(f"tests: {counts['passed']} passed, {counts['failed']} failed{skipped} (of {len(tests)})")
    for test_id, (outcome, message) in sorted(tests.items()):
        if outcome != "passed":
            print(f"  {outcome}: {test_id}: {_cut(message)}")


def _cut(text: str, limit: int = 150) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="where TorchTPU's docs/notebooks were saved")
    parser.add_argument("--only", action="append", default=[], help="a tutorial's name (repeat)")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per tutorial")
    parser.add_argument("--no-tests", action="store_true", help="run the tutorials only")
    args = parser.parse_args(argv)
    folder = args.folder.resolve()
    if not folder.is_dir():
        parser.error(f"{args.folder} is not a folder: give the folder the tutorials are saved in")
    names = tutorials(folder)
    if args.only:
        unknown = sorted(set(args.only) - {p.stem for p in names})
        if unknown:
            parser.error(f"no tutorial named {', '.join(unknown)} in {folder}")
        names = [p for p in names if p.stem in args.only]
    problem = preflight(folder, names)
    if problem:
        print(problem, file=sys.stderr)
        return 2
    runs = [run_tutorial(p, args.timeout) for p in names]
    tests = None if args.no_tests else run_tests(folder, args.timeout)
    render(folder, runs, tests)
    return 0


if __name__ == "__main__":
    sys.exit(main())
