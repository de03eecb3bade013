"""The bundled device and the runtime checked against the real torch-tpu 0.2.0 package.

torch-tpu imports without a TPU (it then refuses to make "tpu" a device), which is enough to
compare its Python API with ``torch.tpu`` of the bundled device and to see what tpu_lab does in
a process where PyTorch autoloaded it. The environment comes from
``scripts/setup_torchtpu_env.sh`` (``make test`` runs it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROBE = ROOT / "tests" / "torchtpu_probe.py"


@pytest.fixture(scope="module")
def torchtpu_python() -> str:
    python = os.environ.get("TPU_LAB_TORCHTPU_PYTHON", str(ROOT / ".venv-torchtpu/bin/python"))
    if not Path(python).exists():
        pytest.skip("no torch-tpu environment: run scripts/setup_torchtpu_env.sh")
    return python


def _run(python: str, args: list[str], **env: str) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), **env}
    return subprocess.run(
        [python, *args], capture_output=True, text=True, env=full_env, timeout=300, cwd=ROOT
    )


def test_torch_tpu_api_matches_the_real_package(torchtpu_python):
    real = _run(torchtpu_python, [str(PROBE), "torchtpu"], TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    ours = _run(sys.executable, [str(PROBE), "bundled"])
    assert real.returncode == 0, real.stderr[-2000:]
    assert ours.returncode == 0, ours.stderr[-2000:]
    real_api, our_api = json.loads(real.stdout), json.loads(ours.stdout)
    assert real_api["names"] and real_api["internal_error"]
    for key in real_api:
        assert our_api[key] == real_api[key], key


def test_autoloaded_torch_tpu_without_a_tpu_gives_one_clear_message(torchtpu_python):
    code = (
        "import torch, sys; assert 'torch_tpu' in sys.modules\n"
        "import tpu_lab\n"
        "try:\n    tpu_lab.status()\nexcept tpu_lab.BackendConflictError as e:\n"
        "    print('raised:', str(e)[:40])"
    )
    out = _run(torchtpu_python, ["-c", code])
    assert out.returncode == 0, out.stderr[-2000:]
    assert "Traceback" not in out.stderr
    assert out.stderr.count("RuntimeWarning: torch_tpu is loaded in this process") == 1
    assert "TORCH_DEVICE_BACKEND_AUTOLOAD=0" in out.stderr
    assert out.stdout.strip() == "raised: torch_tpu is loaded in this process (PyT"


def test_doctor_names_the_fix_with_the_real_package(torchtpu_python):
    out = _run(torchtpu_python, ["-m", "tpu_lab.cli", "doctor"])
    assert out.returncode == 1
    assert "0.2.0 (loaded)" in out.stdout
    assert "PROBLEM: torch_tpu is loaded in this process" in out.stdout
    assert "fix: start Python with TORCH_DEVICE_BACKEND_AUTOLOAD=0" in out.stdout


def test_the_fix_works_bundled_device_beside_installed_torch_tpu(torchtpu_python):
    code = (
        "import tpu_lab, torch, sys\n"
        "print(torch.ones(3, device='tpu').sum().item(), 'torch_tpu' in sys.modules)"
    )
    out = _run(torchtpu_python, ["-c", code], TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "3.0 False"


def test_torchtpu_kernels_do_what_the_device_test_docs_say(torchtpu_python):
    # docs/compatibility/pytorch-device-tests.md explains two test_nn differences by what
    # TorchTPU's compiled kernels do; this reads them again from the installed library.
    where = _run(torchtpu_python, ["-c", "import importlib.util as u; "
                 "print(u.find_spec('torch_tpu').submodule_search_locations[0])"])
    package = where.stdout.strip()
    out = _run(sys.executable, ["scripts/read_torchtpu_kernels.py", package, "--json"])
    assert out.returncode == 0, out.stderr
    facts = json.loads(out.stdout)
    docs = (ROOT / "docs/compatibility/pytorch-device-tests.md").read_text()
    for check in facts["upsample"]:
        assert check["refused"] == ["Int", "Long", "Bool"]
        assert check["message"] == "not implemented for "
        assert check["source"] in docs
    encoder = facts["encoder"]
    assert encoder["boolean_mask"][-1] == "mlir::stablehlo::Select"
    assert "mlir::stablehlo::Add" in encoder["floating_mask"]
    assert encoder["softmax_guards"] == []
    assert "mlir::stablehlo::Div" in encoder["softmax"]
