"""PyTorch's device-backend autoload: ``import torch`` makes "tpu" the bundled device (entry
point group ``torch.backends``), so libraries that cache the accelerator at import (Diffusers)
see it whatever the import order; ``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` turns it off."""

from __future__ import annotations

import os
import subprocess
import sys


def _run(code: str, **env: str) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if k != "TORCH_DEVICE_BACKEND_AUTOLOAD"}
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
        env={**environment, **env},
    )  # fmt: skip


def test_import_torch_alone_gives_the_tpu_device():
    done = _run(
        "import sys, torch\n"
        "print(torch.ones(2, device='tpu').device, 'tpu_lab' in sys.modules,"
        " torch.accelerator.current_accelerator())"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["tpu:0", "True", "tpu"]
    assert done.stderr == ""


def test_autoload_off_leaves_torch_alone():
    done = _run(
        "import sys, torch\n"
        "print('tpu_lab' in sys.modules)\n"
        "torch.ones(1, device='tpu')",
        TORCH_DEVICE_BACKEND_AUTOLOAD="0",
    )
    assert done.stdout.split() == ["False"]
    assert "Expected one of cpu" in done.stderr and "device string: tpu" in done.stderr


def test_diffusers_imported_first_sees_the_device():
    done = _run(
        "import diffusers.pipelines.pipeline_utils as utils\n"
        "from diffusers.utils.torch_utils import get_device\n"
        "print(get_device(), 'tpu' in utils.SUPPORTED_DEVICE_MAP)"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["tpu", "True"]


def test_import_tpu_lab_first_starts_once():
    done = _run(
        "import tpu_lab, torch\n"
        "from tpu_lab import device\n"
        "print(torch.ones(1, device='tpu').device, device.is_installed())"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["tpu:0", "True"]
