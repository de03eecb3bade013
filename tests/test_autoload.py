"""PyTorch's device-backend autoload: ``import torch`` makes "tpu" the bundled device (entry
point group ``torch.backends``), so libraries that cache the accelerator at import (Diffusers)
see it whatever the import order, and changes nothing else; ``TORCH_DEVICE_BACKEND_AUTOLOAD=0``
turns it off."""

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
        "print(torch.ones(1, device='tpu').device, device.exists())"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["tpu:0", "True"]


def test_import_torch_registers_nothing_with_ipython():
    done = _run(
        "from IPython.core.interactiveshell import InteractiveShell\n"
        "shell = InteractiveShell.instance()\n"
        "hooks = {k: list(v) for k, v in shell.events.callbacks.items()}\n"
        "formatters = dict(shell.display_formatter.formatters['text/html'].type_printers)\n"
        "import torch\n"
        "torch.ones(2, device='tpu').cpu()  # a sync point and a transfer: events\n"
        "print('tpu' in shell.magics_manager.magics['line'],\n"
        "      {k: list(v) for k, v in shell.events.callbacks.items()} == hooks,\n"
        "      dict(shell.display_formatter.formatters['text/html'].type_printers) == formatters)"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True", "True"]


def test_autoload_steps_aside_where_pytorch_has_another_accelerator():
    """On a CUDA (or ROCm, XPU, MPS) build PyTorch would rank "tpu" first in torch.accelerator,
    moving code that never names "tpu" off its device: autoload leaves it alone there, and
    ``import tpu_lab`` registers it when asked. PyTorch's own loader is replayed with a CUDA
    accelerator reported (this machine's torch is a CPU build)."""
    done = _run(
        "import sys, torch\n"
        "torch.accelerator.current_accelerator = lambda *a, **k: torch.device('cuda')\n"
        "torch.__spec__._initializing = True  # as while `import torch` runs its autoload\n"
        "torch._import_device_backends()\n"
        "torch.__spec__._initializing = False\n"
        "print('tpu_lab' in sys.modules, torch._C._get_privateuse1_backend_name())\n"
        "import tpu_lab\n"
        "print(torch.ones(1, device='tpu').device)",
        TORCH_DEVICE_BACKEND_AUTOLOAD="0",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "privateuseone", "tpu:0"]
