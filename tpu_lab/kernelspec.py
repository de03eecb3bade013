"""A Jupyter kernel that always gets the simulated device, even where torch-tpu is installed."""

from __future__ import annotations

import json
import sys
from pathlib import Path

KERNEL_NAME = "tpu-lab-simulated"
DISPLAY_NAME = "Python (tpu_lab simulated TPU)"


def spec() -> dict:
    return {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": DISPLAY_NAME,
        "language": "python",
        "env": {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0", "TPU_LAB_BACKEND": "bundled"},
        "metadata": {"debugger": True},
    }


def install(prefix: str | None = None, user: bool = True) -> Path:
    """Write the kernel spec under ``prefix`` (or the user's Jupyter data dir)."""
    if prefix is not None:
        root = Path(prefix) / "share" / "jupyter" / "kernels"
    elif user:
        try:
            from jupyter_core.paths import jupyter_data_dir
        except ImportError:  # Jupyter's default location on Linux
            root = Path.home() / ".local" / "share" / "jupyter" / "kernels"
        else:
            root = Path(jupyter_data_dir()) / "kernels"
    else:
        root = Path(sys.prefix) / "share" / "jupyter" / "kernels"
    target = root / KERNEL_NAME
    target.mkdir(parents=True, exist_ok=True)
    (target / "kernel.json").write_text(json.dumps(spec(), indent=1) + "\n")
    return target
