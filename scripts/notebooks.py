"""Execute the teaching notebooks headless and check what they show.

    python scripts/notebooks.py run [NAME ...]     execute, check, and save the outputs in place
    python scripts/notebooks.py check [NAME ...]   execute and check, leave the files as they are
    python scripts/notebooks.py setup [NAME ...]   rewrite each first code cell from
                                                   tpu_lab.colab.setup_cell (its extras kept)

A notebook passes when no cell errors and no output holds a traceback, an error message or a
machine path (the outputs are stored in the repository and read on GitHub). Each runs as a
participant runs it in JupyterLab: in a fresh kernel, in the notebooks' folder, with the bundled
device's default settings; what a notebook writes goes under scratch/ (git ignores it:
tests/test_notebooks.py checks that running them all leaves ``git status`` as it was). The
kernel talks to this script over local sockets (IPC) in a temporary folder, not TCP: no port is
opened, and ipykernel has no "running over TCP without encryption" warning to print.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
from pathlib import Path

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"

#: Absolute paths of this machine, and words that only appear in failures.
_MACHINE_PATH = re.compile(
    r"(/(?:home|root|tmp|work|Users|private/var|var/folders|usr/lib|opt)/[\w.+~-]+"
    r"|[A-Za-z]:\\\\?[\w.]+\\|site-packages|dist-packages)"
)
_FAILURE = re.compile(r"Traceback \(most recent call last\)|^\w*(?:Error|Exception): ", re.M)


def notebooks(names: list[str] | None = None) -> list[Path]:
    found = sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
    if not names:
        return found
    chosen = [p for p in found if any(p.name.startswith(n) or p.stem == n for n in names)]
    missing = [n for n in names if not any(p.name.startswith(n) or p.stem == n for p in found)]
    if missing:
        raise SystemExit(f"No notebook named {missing}; have {[p.name for p in found]}")
    return chosen


def _texts(output: dict) -> list[str]:
    if output.get("output_type") == "stream":
        return [output.get("text", "")]
    if output.get("output_type") == "error":
        return ["\n".join(output.get("traceback", [])) or output.get("ename", "error")]
    data = output.get("data", {})
    texts = [v for k, v in data.items() if k.startswith("text")]
    return [v if isinstance(v, str) else "".join(v) for v in texts]


def problems(nb) -> list[str]:
    """What is wrong with the outputs of an executed notebook (empty when it is clean)."""
    found = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        if cell.execution_count is None and cell.source.strip():
            found.append(f"cell {index}: not executed")
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error":
                found.append(f"cell {index}: {output.get('ename')}: {output.get('evalue')}")
                continue
            if output.get("name") == "stderr":
                text = output.get("text", "")
                shown = text if len(text) <= 600 else f"{text[:300]} ... {text[-300:]}"
                found.append(f"cell {index}: writes to stderr: {shown!r}")
            for text in _texts(output):
                if match := _FAILURE.search(text):
                    found.append(f"cell {index}: output shows a failure: {match.group(0)!r}")
                if match := _MACHINE_PATH.search(text):
                    found.append(f"cell {index}: output shows a machine path: {match.group(0)!r}")
    return found


def execute(path: Path, timeout: int = 600):
    """Run every cell of ``path`` in a fresh kernel, in the notebook's folder."""
    import nbformat
    from jupyter_client.manager import KernelManager
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    for name in [k for k in os.environ if k.startswith("TPU_LAB_")]:
        del os.environ[name]  # the kernel inherits this environment: default settings
    with tempfile.TemporaryDirectory(prefix="tpu_lab_nb_") as sockets:
        kernel = KernelManager(kernel_name="python3", transport="ipc",
                               ip=os.path.join(sockets, "kernel"))
        client = NotebookClient(
            nb,
            km=kernel,
            timeout=timeout,
            allow_errors=True,
            resources={"metadata": {"path": str(path.parent)}},
        )
        try:
            client.execute()
        finally:  # a kernel manager handed to the client is not the client's to stop
            if kernel.has_kernel:
                kernel.shutdown_kernel(now=True)
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
    return nb


_EXTRAS = re.compile(r"tpu-lab\[([a-z,]*)\]")


def rewrite_setup(nb) -> bool:
    """Replace the notebook's first code cell (its setup cell) with the current one, keeping
    the extras it installs and its outputs; False when it was current already."""
    from tpu_lab.colab import setup_cell

    cell = next(c for c in nb.cells if c.cell_type == "code")
    extras = _EXTRAS.search(cell.source)
    if extras is None:
        raise SystemExit(f"The first code cell installs no tpu-lab[...]:\n{cell.source}")
    new = setup_cell(tuple(extras.group(1).split(",")))
    changed, cell.source = cell.source != new, new
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["run", "check", "setup"])
    parser.add_argument("names", nargs="*", help="notebooks by number or name (default: all)")
    args = parser.parse_args(argv)
    import nbformat

    if args.action == "setup":
        for path in notebooks(args.names):
            nb = nbformat.read(path, as_version=4)
            if rewrite_setup(nb):
                nbformat.write(nb, path)
                print(f"{path.name}: setup cell rewritten")
        return 0
    failed = 0
    for path in notebooks(args.names):
        start = time.perf_counter()
        nb = execute(path)
        found = problems(nb)
        took = time.perf_counter() - start
        print(f"{path.name}: {'ok' if not found else 'FAILED'} in {took:.1f} s")
        for problem in found:
            print(f"  {problem}")
        failed += bool(found)
        if args.action == "run" and not found:
            nbformat.write(nb, path)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
