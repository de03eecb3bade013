"""Which core runs the bundled device (TPU_LAB_CORE), and what doctor says about it."""

from __future__ import annotations

import pytest

import tpu_lab  # noqa: F401  (installs the "tpu" device)
from tpu_lab import device
from tpu_lab.device import core
from tpu_lab.doctor import diagnose


def test_the_environment_chooses_the_core(monkeypatch):
    monkeypatch.setenv(core.CORE_ENV, "python")
    assert core.choose() == core.CoreChoice("python", "TPU_LAB_CORE=python")
    monkeypatch.setenv(core.CORE_ENV, "fast")
    with pytest.raises(ValueError, match="TPU_LAB_CORE='fast': use 'auto'"):
        core.choose()


def test_a_missing_build_falls_back_or_is_an_error(monkeypatch):
    monkeypatch.setattr(core, "status", lambda: (False, "not built for torch X (run: x)"))
    monkeypatch.setenv(core.CORE_ENV, "auto")
    assert core.choose() == core.CoreChoice("python", "the compiled core is not built for torch "
                                            "X (run: x)")  # fmt: skip
    monkeypatch.setenv(core.CORE_ENV, "compiled")
    with pytest.raises(RuntimeError, match="TPU_LAB_CORE=compiled, but the compiled core is not"):
        core.choose()


def test_changed_sources_need_a_rebuild(monkeypatch):
    built, _ = core.status()
    if not built:
        pytest.skip("the compiled core is not built here")
    monkeypatch.setattr(core, "_fingerprint", lambda: "0" * 16)
    assert core.status() == (False, "built from older sources (run: tpu-lab build-core)")


def test_doctor_says_which_core_runs():
    rows = dict(diagnose().rows)
    assert rows["device core"] == f"{device.CORE.name} ({device.CORE.reason})"
