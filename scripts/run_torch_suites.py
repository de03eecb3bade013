"""Run PyTorch's own test files with tpu-lab installed and without it, and compare every test.

    python scripts/run_torch_suites.py FOLDER [FILE ...] [--python PY]
                                      [--baseline-python PY | --baseline-venv DIR] [--timeout S]

FOLDER holds test files read from PyTorch's repository (github.com/pytorch/pytorch), each at
the path it has there, kept outside this repository (they are other people's code). FILE is a
path relative to FOLDER; without any, the default selection below runs. Installing tpu-lab must
change nothing for code that does not use the "tpu" device, so every test must end the same way
in both environments:

- with tpu-lab: PY (default: this interpreter), an environment where tpu-lab is installed, with
  PyTorch's device-backend autoload on (``TORCH_DEVICE_BACKEND_AUTOLOAD`` and the ``TPU_LAB_*``
  settings are removed from the environment), so ``import torch`` loads it as it does for users;
- without tpu-lab: an environment holding the same torch and no tpu-lab at all (turning the
  autoload off is not the same thing: the package would still be importable).
  ``--baseline-venv DIR`` creates it on first use (``pip install torch==<PY's torch version>
  pytest expecttest hypothesis numpy``); ``--baseline-python`` names an existing one.

The default selection (the stored versions nearest to torch 2.13.0; no file of the exact
release commit is stored, so a test may fail in both environments, which this comparison
allows):

- ``test/test_float32_precision.py`` (pytorch/pytorch 834055f167ac3736d4e26aa6381640a495f73fb7):
  ``torch.set_float32_matmul_precision`` and the ``fp32_precision`` flags of the cuda, cudnn
  and mkldnn backends, all of it runnable on the CPU;
- ``test/inductor/test_backward_symint_guards.py`` (pytorch/pytorch
  8872fa4e5851d528ea33ed7c98b07b0542357a31): ``torch.compile`` with its default backend
  (Inductor) under automatic dynamic shapes, forward and backward, through the FX graph cache.

Each file runs in its own pytest process per environment, one after the other, with a fresh
Inductor cache directory each. This module, loaded into pytest with ``-p``, records every
test's outcome as it happens (a run stopped by its timeout still counts what it finished). The
report gives the counts per file and environment, then every test whose outcome differs: its
status (passed, failed, error, skipped, xfailed, xpassed), or, for a test that fails both ways,
the first line of its failure, since a test that fails for another reason has not ended the same
way. Exit status 0 when nothing differs, 1 otherwise, 2 for a usage error.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent

#: Paths relative to FOLDER, as in PyTorch's repository (the module docstring says why each).
DEFAULT_FILES = (
    "test/test_float32_precision.py",
    "test/inductor/test_backward_symint_guards.py",
)
#: What the environment without tpu-lab needs besides torch to run PyTorch's test files
#: (torch.testing._internal imports numpy).
BASELINE_PACKAGES = ("pytest", "expecttest", "hypothesis", "numpy")
_LOG_ENV = "TORCH_SUITES_LOG"
WITH, WITHOUT = "with tpu-lab", "without tpu-lab"


# ---- the pytest plugin (runs in the child processes) -------------------------------------------


def pytest_runtest_logreport(report):  # pragma: no cover - runs in the child
    _log(report.nodeid, report.when, report.outcome, hasattr(report, "wasxfail"), report)


def pytest_collectreport(report):  # pragma: no cover - runs in the child
    if report.failed:
        _log(report.nodeid, "collect", "failed", False, report)


def _log(test_id, when, outcome, xfail, report):  # pragma: no cover - runs in the child
    path = os.environ.get(_LOG_ENV)
    if not path:
        return
    message = ""
    if outcome == "failed" and when == "collect":  # the import's own error, not pytest's summary
        errors = [ln[1:].strip() for ln in str(report.longrepr).splitlines() if ln[:2] == "E "]
        message = errors[-1] if errors else str(report.longrepr)
    elif outcome == "failed":
        crash = getattr(report.longrepr, "reprcrash", None)
        message = crash.message if crash is not None else str(report.longrepr)
    elif xfail:
        message = report.wasxfail
    elif outcome == "skipped" and isinstance(report.longrepr, tuple):
        message = str(report.longrepr[2])
    record = {"id": test_id, "when": when, "outcome": outcome, "xfail": xfail, "message": message}
    with open(path, "a") as f:
        f.write(json.dumps(record) + "\n")


# ---- outcomes and their comparison ---------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    status: str  # passed, failed, error, skipped, xfailed, xpassed
    message: str = ""  # the failure's first line, or the skip's reason


_ADDRESS = re.compile(r"0x[0-9a-fA-F]+")


def first_line(message: str) -> str:
    """A failure's first non-empty line, memory addresses masked (they differ run to run)."""
    lines = [ln.strip() for ln in message.splitlines() if ln.strip()]
    return _ADDRESS.sub("0x…", lines[0])[:300] if lines else ""


def outcomes(records: list[dict]) -> dict[str, Outcome]:
    """Fold pytest's reports of each phase (collect, setup, call, teardown): one per test."""
    result: dict[str, Outcome] = {}
    for r in records:
        test_id, when, outcome = r["id"], r["when"], r["outcome"]
        message = first_line(r.get("message", ""))
        if outcome == "failed" and when in ("collect", "setup", "teardown"):
            if result.get(test_id, Outcome("")).status not in ("failed", "error"):
                result[test_id] = Outcome("error", message)
        elif when == "call" and outcome == "passed":
            result[test_id] = Outcome("xpassed" if r.get("xfail") else "passed")
        elif when == "call" and outcome == "failed":
            result[test_id] = Outcome("failed", message)
        elif outcome == "skipped":
            result[test_id] = Outcome("xfailed" if r.get("xfail") else "skipped", message)
    return result


def differences(with_lab: dict[str, Outcome], without: dict[str, Outcome]) -> list[str]:
    """The ids of the tests that did not end the same way, in order."""
    missing = Outcome("not run")
    differ = []
    for test_id in sorted(set(with_lab) | set(without)):
        a, b = with_lab.get(test_id, missing), without.get(test_id, missing)
        failing = a.status in ("failed", "error")
        if a.status != b.status or (failing and a.message != b.message):
            differ.append(test_id)
    return differ


def counts(results: dict[str, Outcome]) -> str:
    order = ("passed", "failed", "error", "skipped", "xfailed", "xpassed")
    found = [f"{sum(o.status == s for o in results.values())} {s}" for s in order]
    shown = [c for c in found if not c.startswith("0 ")]
    return ", ".join(shown) or "no tests"


def _describe(outcome: Outcome) -> str:
    return f"{outcome.status} ({outcome.message})" if outcome.message else outcome.status


@dataclass
class FileRun:
    results: dict[str, Outcome]
    returncode: int | None  # None: stopped by the timeout


def render(file: str, with_lab: FileRun, without: FileRun) -> tuple[str, int]:
    """The report of one file, and how many of its tests differ."""
    width = max(len(WITH), len(WITHOUT)) + 1
    lines = [file]
    for name, run in ((WITH, with_lab), (WITHOUT, without)):
        stopped = "  (stopped by the timeout)" if run.returncode is None else ""
        lines.append(f"  {(name + ':').ljust(width)} {counts(run.results)}{stopped}")
    differ = differences(with_lab.results, without.results)
    missing = Outcome("not run")
    for test_id in differ:
        lines.append(f"  differs: {test_id}")
        for name, run in ((WITH, with_lab), (WITHOUT, without)):
            outcome = run.results.get(test_id, missing)
            lines.append(f"    {(name + ':').ljust(width)} {_describe(outcome)}")
    return "\n".join(lines), len(differ)


# ---- running a file ------------------------------------------------------------------------


def child_env(side: str, log: Path, cache: Path, base: dict[str, str] | None = None) -> dict:
    """The environment of one pytest process: the user's, without tpu-lab's settings and
    without autoload switched off. Only the run with tpu-lab keeps the caller's PYTHONPATH."""
    env = {
        k: v
        for k, v in (os.environ if base is None else base).items()
        if k != "TORCH_DEVICE_BACKEND_AUTOLOAD" and not k.startswith("TPU_LAB_")
    }
    inherited = [env["PYTHONPATH"]] if side == WITH and env.get("PYTHONPATH") else []
    env.update(
        {
            _LOG_ENV: str(log),
            "TORCHINDUCTOR_CACHE_DIR": str(cache),
            "PYTHONPATH": os.pathsep.join([str(HERE), *inherited]),
            "PYTHONDONTWRITEBYTECODE": "1",
        }
    )
    return env


def run_file(
    python: str,
    folder: Path,
    file: str,
    env: dict[str, str],
    log: Path,
    timeout: float,
    extra: list[str] | tuple[str, ...] = (),
    nodes: list[str] | tuple[str, ...] = (),
) -> FileRun:
    """Run one test file with pytest under ``python`` (``extra``: more pytest arguments;
    ``nodes``: only these test ids, relative to FOLDER); its outcomes come from ``log``."""
    log.unlink(missing_ok=True)
    path = folder / file
    targets = [str(folder / node) for node in nodes] or [str(path)]
    cmd = [python, "-m", "pytest", *targets, "--rootdir", str(folder), "-p", "run_torch_suites"]
    cmd += ["-p", "no:cacheprovider", "-q", "--no-header", "-rN", "--tb=no", *extra]
    try:
        done = subprocess.run(
            cmd, cwd=path.parent, env=env, capture_output=True, text=True, timeout=timeout
        )
        returncode: int | None = done.returncode
    except subprocess.TimeoutExpired:
        returncode = None
    records = [json.loads(ln) for ln in log.read_text().splitlines()] if log.exists() else []
    return FileRun(outcomes(records), returncode)


# ---- the two environments ------------------------------------------------------------------

_PROBE = (
    "import importlib.metadata as m, torch; "
    "print(torch.__version__, any(e.name == 'tpu_lab' "
    "for e in m.entry_points(group='torch.backends')))"
)


def probe(python: str) -> tuple[str, bool]:
    """``python``'s torch version, and whether tpu-lab is installed there for autoload."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"  # the probe only reads metadata
    out = subprocess.run(
        [python, "-c", _PROBE], env=env, capture_output=True, text=True, check=True
    ).stdout.split()
    return out[0], out[1] == "True"


def baseline_python(venv: Path, torch_version: str) -> str:
    """The interpreter of ``venv``, created with torch ``torch_version`` and nothing of tpu-lab."""
    python = venv / "bin" / "python"
    if not python.exists():
        print(f"Creating {venv}: torch=={torch_version} and {', '.join(BASELINE_PACKAGES)}")
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        install = [str(python), "-m", "pip", "install", "--quiet"]
        subprocess.run([*install, f"torch=={torch_version}", *BASELINE_PACKAGES], check=True)
    return str(python)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="where PyTorch's test files are kept")
    parser.add_argument("files", nargs="*", help="paths relative to FOLDER (default: see above)")
    parser.add_argument("--python", default=sys.executable, help="an environment with tpu-lab")
    side = parser.add_mutually_exclusive_group()
    side.add_argument("--baseline-python", help="an environment with torch and no tpu-lab")
    side.add_argument(
        "--baseline-venv", type=Path, help="create (once) and use this environment without tpu-lab"
    )
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per file and side")
    args = parser.parse_args(argv)
    files = args.files or list(DEFAULT_FILES)
    absent = [f for f in files if not (args.folder / f).is_file()]
    if absent:
        parser.error(f"not in {args.folder}: {', '.join(absent)} (read them from pytorch/pytorch)")
    torch_version, installed = probe(args.python)
    if not installed:
        parser.error(f"{args.python} has no tpu-lab installed (no 'torch.backends' entry point)")
    if args.baseline_python:
        baseline = args.baseline_python
    else:
        venv = args.baseline_venv or args.folder / ".venv-without-tpu-lab"
        baseline = baseline_python(venv, torch_version.split("+")[0])
    base_version, base_installed = probe(baseline)
    if base_installed:
        parser.error(f"{baseline} has tpu-lab installed: it cannot be the environment without it")
    if base_version != torch_version:
        parser.error(f"torch {base_version} in {baseline}, {torch_version} in {args.python}")
    print(f"torch {torch_version}; {WITH}: {args.python}; {WITHOUT}: {baseline}\n")
    differ = 0
    with tempfile.TemporaryDirectory(prefix="torch-suites-") as work:
        for file in files:
            runs = {}
            for name, python in ((WITH, args.python), (WITHOUT, baseline)):
                tag = f"{len(runs)}-{Path(file).stem}"
                log, cache = Path(work) / f"{tag}.jsonl", Path(work) / f"{tag}-inductor"
                env = child_env(name, log, cache)
                runs[name] = run_file(python, args.folder, file, env, log, args.timeout)
            text, n = render(file, runs[WITH], runs[WITHOUT])
            print(text + "\n", flush=True)
            differ += n
    print(f"{len(files)} files: {differ} tests did not end the same way with and without tpu-lab.")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
