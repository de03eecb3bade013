"""Backend selection, coexistence with torch_tpu, topologies, the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import tpu_lab
from tpu_lab.errors import TopologyError
from tpu_lab.hardware import parse_topology

ROOT = Path(__file__).resolve().parents[1]


def _python(code: str, env: dict | None = None, path: list[str] | None = None):
    full_env = {**os.environ, **(env or {})}
    full_env["PYTHONPATH"] = os.pathsep.join([*(path or []), str(ROOT)])
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=120,
    )


@pytest.mark.parametrize("first", ["import torch; import tpu_lab", "import tpu_lab; import torch"])
def test_import_order_does_not_matter(first):
    out = _python(f"{first}\nprint(torch.ones(2, device='tpu').sum().item())")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "2.0"


def test_status_describes_the_bundled_device():
    s = tpu_lab.status()
    assert s.simulated and s.backend == "tpu_lab bundled device"
    text = tpu_lab.view(s).to_text(100)  # the device alone: no cache or event rows
    assert "  generation    TPU v6e (simulated)\n" in text and "compile cache" not in text


def test_topology_from_environment_variable():
    out = _python(
        "import tpu_lab, torch; s = tpu_lab.status(); print(s.topology, s.topology_shape, "
        "torch.tpu.get_device_properties().total_memory >> 30)",
        env={"TPU_LAB_TOPOLOGY": "v5e-8"},
    )
    assert out.stdout.strip() == "v5e-8 (2, 4, 1) 16", out.stderr


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("v9-4", "Unknown TPU generation 'v9'. Known generations: v4, v5e, v5p, v6e, v7."),
        ("v6e-3", "TPU v6e has no 3-device topology on one host; choose one of 1, 4, 8"),
        ("six chips", "Cannot read the topology 'six chips': expected GENERATION-DEVICES"),
    ],
)
def test_bad_topology_names(name, message):
    with pytest.raises(TopologyError) as info:
        parse_topology(name)
    assert str(info.value).startswith(message)


def test_topology_names():
    assert parse_topology("v6e-4").shape == (2, 2, 1)
    assert parse_topology("TPU v4-8").shape == (2, 2, 2)
    assert parse_topology("v7-4").shape == (1, 2, 1, 2)
    assert parse_topology("v5p").devices == 1


def test_bad_topology_env_is_one_clear_message():
    out = _python("import tpu_lab", env={"TPU_LAB_TOPOLOGY": "v6e-5"})
    assert out.returncode != 0
    assert "TPU_LAB_TOPOLOGY='v6e-5' is not valid. TPU v6e has no 5-device topology" in out.stderr


@pytest.fixture
def fake_torch_tpu(tmp_path):
    """A stand-in for an imported torch_tpu on a machine without TPU chips."""
    pkg = tmp_path / "torch_tpu"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    return str(tmp_path)


def test_torch_tpu_loaded_without_hardware_gives_one_clear_message(fake_torch_tpu):
    out = _python(
        "import torch_tpu, tpu_lab\n"
        "try:\n    tpu_lab.status()\nexcept tpu_lab.BackendConflictError as e:\n"
        "    print('raised:', e)",
        path=[fake_torch_tpu],
    )
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr
    assert out.stderr.count("torch_tpu is loaded in this process") == 1
    assert "TORCH_DEVICE_BACKEND_AUTOLOAD=0" in out.stderr
    assert out.stdout.startswith("raised: torch_tpu is loaded in this process")


def test_torch_tpu_installed_but_not_loaded_uses_the_bundled_device(fake_torch_tpu):
    out = _python(
        "import tpu_lab, torch, sys; print(tpu_lab.status().simulated, 'torch_tpu' in sys.modules)",
        path=[fake_torch_tpu],
        env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"},
    )
    assert out.stdout.strip() == "True False", out.stderr


def test_doctor_reports_the_conflict_with_its_fix(fake_torch_tpu):
    out = _python(
        "import torch_tpu; from tpu_lab.cli import main; raise SystemExit(main(['doctor']))",
        path=[fake_torch_tpu],
    )
    assert out.returncode == 1
    assert "PROBLEM: torch_tpu is loaded in this process" in out.stdout
    assert "fix: start Python with TORCH_DEVICE_BACKEND_AUTOLOAD=0" in out.stdout


def test_doctor_on_a_healthy_machine():
    out = _python("from tpu_lab.cli import main; raise SystemExit(main(['doctor']))")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "backend       tpu_lab bundled device (simulated)" in out.stdout
    assert "No problems found." in out.stdout


def test_bad_backend_env():
    out = _python("import tpu_lab; print(tpu_lab.backend())", env={"TPU_LAB_BACKEND": "gpu"})
    assert "TPU_LAB_BACKEND='gpu' is not valid; use one of auto, bundled, torchtpu." in out.stderr


def test_kernel_install(tmp_path):
    from tpu_lab.cli import main

    assert main(["kernel", "install", "--prefix", str(tmp_path)]) == 0
    spec = json.loads(
        (tmp_path / "share/jupyter/kernels/tpu-lab-simulated/kernel.json").read_text()
    )
    assert spec["env"] == {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0", "TPU_LAB_BACKEND": "bundled"}
    assert spec["display_name"] == "Python (tpu_lab simulated TPU)"


def test_the_tour_runs_and_checks_itself():
    out = _python("from tpu_lab.cli import main; raise SystemExit(main(['tour']))")
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "same as CPU:   True" in out.stdout
    assert "TPU time:      estimated on an idealised TPU v6e chip (not a measurement): " in out.stdout
    assert "torch.OutOfMemoryError: RESOURCE_EXHAUSTED" in out.stdout


def test_a_mode_change_through_torchtpu_is_published_and_logged(monkeypatch):
    """TorchTPU publishes nothing: its adapter does, so the event log and the dashboard see a
    mode change that tpu_lab makes (tpu_lab.session, %tpu mode, the dashboard's toggle)."""
    import types

    import torch

    from tpu_lab import session
    from tpu_lab.events import log
    from tpu_lab.runtime import select
    from tpu_lab.runtime.torchtpu import TorchTPUBackend

    mode = torch.tpu.EagerMode
    fake_tpu = types.SimpleNamespace(EagerMode=mode, eager_mode=mode.DEFER_NEVER)
    monkeypatch.setattr(torch, "tpu", fake_tpu)  # TorchTPU's module: a plain attribute
    monkeypatch.setattr(select, "_active", TorchTPUBackend())
    seq = log.last_seq()
    assert session.set_mode("fuse") == ("DEFER_NEVER", "DEFER_AND_FUSE")
    with session.mode("blocking"):
        assert fake_tpu.eager_mode is mode.DEFER_NEVER_AND_LAUNCH_BLOCKING
    assert fake_tpu.eager_mode is mode.DEFER_AND_FUSE
    session.set_mode("fuse")  # no change: nothing published
    assert [e.summary for e in log.since(seq, "mode_change")] == [
        "eager mode DEFER_NEVER -> DEFER_AND_FUSE",
        "eager mode DEFER_AND_FUSE -> DEFER_NEVER_AND_LAUNCH_BLOCKING",
        "eager mode DEFER_NEVER_AND_LAUNCH_BLOCKING -> DEFER_AND_FUSE",
    ]
