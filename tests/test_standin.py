"""``import torch_tpu`` where TorchTPU is absent: tpu_lab's stand-in, mirroring TorchTPU 0.2.0's
modules, saying what it is, and never shadowing a real installation."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _python(code: str, python: str = sys.executable, **env: str) -> subprocess.CompletedProcess:
    full = {**os.environ, "PYTHONPATH": str(ROOT), **env}
    return subprocess.run(
        [python, "-c", code], capture_output=True, text=True, env=full, timeout=300, cwd=ROOT
    )


TUTORIAL = """
import torch
import tpu_lab
import torch_tpu
from torch_tpu import api
from torch_tpu.api.streams import TpuEvent, TpuStream
from torch_tpu._internal import execution_mode, sync
from torch_tpu._internal.utils import utils
from tpu_lab.runtime import torch_tpu_finder as standin
from tpu_lab.runtime import select

print(repr(torch_tpu))
print(torch_tpu.__file__.startswith(str(standin.PACKAGE_DIR)))
device = api.tpu_device()
print(device, api.tpu_device() is device)
x = torch.ones(3, device=device)
execution_mode.eager_mode = execution_mode.EagerMode.DEFER_AND_FUSE
print(torch.tpu.eager_mode.name, execution_mode.eager_mode is torch.tpu.eager_mode)
with execution_mode.set_eager_mode(execution_mode.EagerMode.DEFER_NEVER):
    print(torch.tpu.eager_mode.name)
print(torch.tpu.eager_mode.name)
execution_mode.set_eager_mode(execution_mode.EagerMode.DEFER_NEVER)  # as before 0.2.0
print(execution_mode.get_eager_mode().name)
sync.synchronize(x)
print(sync.is_materialized(x), TpuStream is torch.tpu.Stream, TpuEvent is torch.tpu.Event)
print(standin.state(), select.torch_tpu_state())
import torch.distributed as dist
print("tpu_dist" in dist.Backend.backend_list)
"""


def test_torchtpu_tutorial_imports_resolve_to_the_bundled_device():
    out = _python(TUTORIAL)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stderr == ""
    assert out.stdout.splitlines() == [
        "<module 'torch_tpu' (tpu_lab stand-in: TorchTPU 0.2.0's API on the bundled, simulated "
        f"device; not TorchTPU) from '{ROOT}/tpu_lab/standin/_torch_tpu/__init__.py'>",
        "True",
        "tpu True",
        "DEFER_AND_FUSE True",
        "DEFER_NEVER",
        "DEFER_AND_FUSE",
        "DEFER_NEVER",
        "True True True",
        "standin absent",
        "True",
    ]


def test_doctor_says_import_torch_tpu_gives_the_standin():
    out = _python("import tpu_lab, torch_tpu\nfrom tpu_lab.doctor import diagnose\nprint(diagnose())")
    assert out.returncode == 0, out.stderr[-3000:]
    rows = {line.split(None, 1)[0]: line.split(None, 1)[1] for line in out.stdout.splitlines()
            if line.startswith("  ") and len(line.split(None, 1)) == 2}  # fmt: skip
    assert rows["torch_tpu"] == "not installed (absent)"
    assert rows["stand-in"] == "loaded: tpu_lab's stand-in (TorchTPU 0.2.0 API on the bundled device)"


def test_without_tpu_lab_or_switched_off_import_torch_tpu_fails_as_before():
    out = _python("import torch_tpu")
    assert "No module named 'torch_tpu'" in out.stderr
    out = _python("import tpu_lab\nimport torch_tpu", TPU_LAB_TORCH_TPU_STANDIN="0")
    assert "No module named 'torch_tpu'" in out.stderr


def test_a_real_torch_tpu_is_never_shadowed():
    python = os.environ.get("TPU_LAB_TORCHTPU_PYTHON", str(ROOT / ".venv-torchtpu/bin/python"))
    if not Path(python).exists():
        pytest.skip("no torch-tpu environment: run scripts/setup_torchtpu_env.sh")
    code = (
        "import importlib.util, sys\n"
        "import tpu_lab\n"
        "from tpu_lab.runtime import torch_tpu_finder as standin\n"
        "spec = importlib.util.find_spec('torch_tpu')\n"
        "print(standin.state(), 'site-packages' in spec.origin, 'torch_tpu' in sys.modules)"
    )
    out = _python(code, python, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == "shadowed True False"
