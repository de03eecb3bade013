"""Every teaching notebook runs top to bottom in a fresh kernel, in the notebooks' folder as a
participant runs it, and its stored outputs (read on GitHub) are clean: no errors, tracebacks,
stderr or machine paths; running them all leaves the checkout as it was (``git status``)."""

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

_spec = importlib.util.spec_from_file_location(
    "nb_runner", Path(__file__).resolve().parent.parent / "scripts" / "notebooks.py"
)
runner = importlib.util.module_from_spec(_spec)
sys.modules["nb_runner"] = runner
_spec.loader.exec_module(runner)

NOTEBOOKS = runner.notebooks()


def test_there_are_notebooks():
    assert len(NOTEBOOKS) >= 5, [p.name for p in NOTEBOOKS]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_stored_outputs_are_clean(path):
    import nbformat

    nb = nbformat.read(path, as_version=4)
    assert runner.problems(nb) == []


def _git_status() -> str | None:
    """``git status --porcelain`` of the checkout (ignored files left out), None outside one."""
    if shutil.which("git") is None:
        return None
    done = subprocess.run(["git", "status", "--porcelain"], cwd=runner.NOTEBOOKS.parent,
                          capture_output=True, text=True)
    return done.stdout if done.returncode == 0 else None


@pytest.fixture(scope="module")
def status_before():
    """The checkout's status before the first notebook runs (empty in CI's fresh clone)."""
    return _git_status()


#: The notebooks the test above has run in this session.
_RAN: set[Path] = set()


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_clean(path, status_before):
    nb = runner.execute(path, timeout=300)
    _RAN.add(path)
    assert runner.problems(nb) == []


def test_running_every_notebook_leaves_git_status_as_it_was(status_before):
    """After the notebooks above ran in the notebooks' folder: nothing new, nothing changed (what
    they write is under scratch/, which git ignores); in a clean checkout, empty."""
    if status_before is None:
        pytest.skip("not a git checkout")
    for path in NOTEBOOKS:
        if path not in _RAN:  # run alone (-k), this test runs them itself
            runner.execute(path, timeout=300)
    assert _git_status() == status_before


def test_problems_finds_errors_paths_and_tracebacks():
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("1", execution_count=1, outputs=[
            nbformat.v4.new_output("stream", name="stdout", text="saved to /home/ann/x.pt\n")
        ]),
        nbformat.v4.new_code_cell("2", execution_count=2, outputs=[
            nbformat.v4.new_output("error", ename="ValueError", evalue="bad", traceback=[])
        ]),
        nbformat.v4.new_code_cell("3", execution_count=None),
        nbformat.v4.new_code_cell("4", execution_count=4, outputs=[
            nbformat.v4.new_output("display_data", data={
                "text/plain": "Traceback (most recent call last):\n  ..."
            })
        ]),
    ]
    assert runner.problems(nb) == [
        "cell 0: output shows a machine path: '/home/ann'",
        "cell 1: ValueError: bad",
        "cell 2: not executed",
        "cell 3: output shows a failure: 'Traceback (most recent call last)'",
    ]
