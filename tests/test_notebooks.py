"""Every teaching notebook runs top to bottom in a fresh kernel, and its stored outputs (read on
GitHub) are clean: no errors, tracebacks, stderr or machine paths."""

import importlib.util
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


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_clean(path):
    nb = runner.execute(path, timeout=300)
    assert runner.problems(nb) == []


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
