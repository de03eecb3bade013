"""An earlier revision of ``tpu_lab/`` beside this checkout, to measure the two side by side in
one run: ``git archive REV tpu_lab`` into a folder, with this checkout's compiled device core
(built from the same sources, so neither copy builds one)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def checkout(revision: str, into: Path) -> Path:
    """``tpu_lab/`` at ``revision`` under ``into`` (put ``into`` first on ``PYTHONPATH``)."""
    archive = subprocess.run(["git", "archive", revision, "tpu_lab"], cwd=ROOT, check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    built = ROOT / "tpu_lab" / "device" / "core" / "_build"
    if built.exists():
        shutil.copytree(built, into / "tpu_lab" / "device" / "core" / "_build")
    return into
