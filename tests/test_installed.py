"""scripts/installed.py: whether scripts/setup.sh has anything to install (``make lab`` after
``make run`` installs nothing and opens JupyterLab at once)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _installed(extras: str) -> int:
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "installed.py"), extras],
                          capture_output=True).returncode


def test_the_workshops_extras_are_installed_here_and_torch_tpu_is_not():
    assert _installed("workshop") == 0  # tpu-lab[hf,lab,demo,video,cluster]: in [dev]
    assert _installed("tpu") == 1  # torch-tpu is never in the test environment


def test_setup_installs_nothing_where_everything_is_there():
    venv = Path(sys.prefix)
    done = subprocess.run(["bash", str(ROOT / "scripts" / "setup.sh"), "workshop"], cwd=ROOT,
                          env={"VENV": str(venv), "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"tpu_lab is installed in {venv} with extras [workshop]: nothing to install\n"
