"""What the documentation tests share: the site of a checkout built as ``make docs`` builds it
(scripts/docs.py, strict), in a subprocess that imports that checkout's tpu_lab."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def build(root: Path, out: Path) -> subprocess.CompletedProcess:
    """``python <root>/scripts/docs.py <out>`` with ``root`` first on the import path."""
    return subprocess.run(
        [sys.executable, str(root / "scripts" / "docs.py"), str(out)],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
        timeout=900,
    )


def output(built: subprocess.CompletedProcess) -> str:
    """The end of what a build printed, for a failing assertion."""
    return built.stdout[-3000:] + built.stderr[-5000:]
