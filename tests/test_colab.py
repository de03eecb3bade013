"""tpu_lab.colab: the install source, the notebooks' setup cell, and Colab's runtimes, in a
simulated Colab (a fake ``google.colab`` package and Colab's environment variable)."""

from __future__ import annotations

import importlib.machinery
import re
import sys
import tomllib
import types
from pathlib import Path

import nbformat
import pytest

from tpu_lab import _install, colab, doctor
from tpu_lab.runtime import select

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def test_the_torch_range_is_the_packages_dependency():
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert f"torch{colab.TORCH_REQUIREMENT}" in dependencies


HOME = "https://github.com/tpu-lab/tpu_lab"


def test_the_projects_home_is_named_once_in_pyproject():
    urls = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]
    assert urls == {"Homepage": HOME}
    assert _install.home() == HOME


def test_an_installed_copy_reads_the_home_from_its_metadata(monkeypatch):
    class Metadata:
        def get_all(self, key):
            assert key == "Project-URL"
            return ["Documentation, https://example.org/docs", f"Homepage, {HOME}/fork"]

    monkeypatch.setattr(_install, "checkout", lambda: None)
    monkeypatch.setattr(_install.importlib.metadata, "metadata", lambda dist: Metadata())
    assert _install.home.__wrapped__() == f"{HOME}/fork"


def test_the_requirement_names_the_repository_never_an_index():
    assert _install.requirement(("hf", "video")) == f"tpu-lab[hf,video] @ git+{HOME}"
    assert _install.requirement((), "git+file:///src/tpu_lab") == "tpu-lab @ git+file:///src/tpu_lab"


def test_install_hints_in_a_checkout_and_in_an_installed_copy(monkeypatch):
    assert _install.checkout() == ROOT  # the tests run in a git checkout
    assert _install.hint("lab") == 'pip install -e ".[lab]"'
    assert _install.hint("hf", "tpu") == 'pip install -e ".[hf,tpu]"'
    assert _install.hint(flags="-U") == 'pip install -U -e "."'
    monkeypatch.setattr(_install, "checkout", lambda: None)
    assert _install.hint("lab") == f'pip install "tpu-lab[lab] @ git+{HOME}"'


def test_the_doctor_in_a_checkout_suggests_an_editable_install(monkeypatch):
    real = doctor._version
    monkeypatch.setattr(doctor, "_version", lambda d: None if d == "anywidget" else real(d))
    rows = dict(doctor.diagnose().rows)
    assert rows["anywidget"] == 'not installed (pip install -e ".[lab]")'


@pytest.mark.parametrize("page", [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))])
def test_every_install_line_in_the_docs_names_the_projects_home(page):
    for source in re.findall(r"git\+https://[^\s\"')`]+", page.read_text()):
        assert source == _install.source(), page


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_notebook_starts_with_the_setup_cell(path):
    nb = nbformat.read(path, as_version=4)
    first = next(c for c in nb.cells if c.cell_type == "code")
    extras = re.search(r'"tpu-lab\[([a-z,]*)\] @ ', first.source)
    assert extras, first.source
    assert first.source == colab.setup_cell(tuple(extras.group(1).split(",")))
    everything = "\n".join(c.source for c in nb.cells)
    pypi_name = re.search(r"pip install[^\n@]*\btpu-lab(\[[a-z,]*\])?(?! @)[\"' \n]", everything)
    assert pypi_name is None, pypi_name.group(0)


# ---- a simulated Colab ------------------------------------------------------------------------


@pytest.fixture
def in_colab(monkeypatch):
    """Colab's kernel as colabtools describes it: ``google.colab`` importable and
    ``COLAB_RELEASE_TAG`` set; the accelerator is chosen per test."""
    for name in ("google", "google.colab"):
        module = types.ModuleType(name)
        module.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=True)
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setenv("COLAB_RELEASE_TAG", "release-colab_20260601-060048_RC00")
    monkeypatch.setattr(_install, "checkout", lambda: None)  # Colab installs from the home

    def runtime(kind: str) -> None:
        monkeypatch.setattr(select, "tpu_hardware_present", lambda: kind == "tpu")
        nvidia_smi = "/usr/bin/nvidia-smi" if kind == "gpu" else None
        monkeypatch.setattr(colab.shutil, "which", lambda cmd: nvidia_smi)

    return runtime


def test_colab_needs_its_package_and_its_release_tag(monkeypatch, in_colab):
    assert colab.in_colab()
    monkeypatch.delenv("COLAB_RELEASE_TAG")
    assert not colab.in_colab()


def test_outside_colab_the_doctor_says_nothing_about_it(monkeypatch):
    monkeypatch.delenv("COLAB_RELEASE_TAG", raising=False)
    report = doctor.diagnose()
    assert "Colab" not in str(report)
    assert report.advice == []


@pytest.mark.parametrize(
    ("kind", "advice"),
    [
        (
            "cpu",
            "Colab CPU runtime: 'tpu' is the simulated device. For TPU chips: Runtime > Change "
            "runtime type > a TPU.",
        ),
        (
            "gpu",
            "Colab GPU runtime: 'tpu' is the simulated device, computing on the CPU; the GPU "
            "stays CUDA's (torch.compile and float32 matmul precision work for it as without "
            "tpu-lab). For TPU chips: Runtime > Change runtime type > a TPU.",
        ),
        (
            "tpu",
            "Colab TPU runtime: TorchTPU is not installed, so 'tpu' is the simulated device. To "
            'use the chips: pip install "tpu-lab[hf,tpu] @ git+https://github.com/tpu-lab/tpu_lab"'
            ", then Runtime > Restart session.",
        ),
    ],
)
def test_the_doctor_recognises_each_colab_runtime(in_colab, kind, advice):
    in_colab(kind)
    report = doctor.diagnose()
    assert report.rows[2] == (
        "Colab",
        f"{kind.upper()} runtime (release-colab_20260601-060048_RC00)",
    )
    assert report.advice == [advice]
    text = str(report)
    assert f"\n\n{advice}\n\n" in text


def test_on_a_tpu_runtime_the_simulation_is_a_problem_with_the_repositorys_fix(in_colab):
    in_colab("tpu")
    problems = dict(doctor.diagnose().problems)
    assert problems["this machine has TPU chips but tpu_lab is simulating one."] == (
        'pip install "tpu-lab[tpu] @ git+https://github.com/tpu-lab/tpu_lab" and unset '
        "TPU_LAB_BACKEND to use TorchTPU."
    )


def test_the_dashboard_takes_anywidgets_colab_path(monkeypatch, in_colab):
    """anywidget enables Colab's custom widget manager when ``google.colab.output`` is loaded,
    and puts the manager's URL in the widget's display metadata: the dashboard keeps both."""
    pytest.importorskip("anywidget")
    from anywidget import _util

    from tpu_lab.views.dashboard import Dashboard

    url = "https://ssl.gstatic.com/colaboratory-static/widgets/colab-cdn-widget-manager/x.js"
    enabled = []
    output = types.ModuleType("google.colab.output")

    def enable_custom_widget_manager():
        enabled.append(True)
        output._widgets._installed_url = url

    output.enable_custom_widget_manager = enable_custom_widget_manager
    output._widgets = types.SimpleNamespace(_installed_url=None)
    monkeypatch.setitem(sys.modules, "google.colab.output", output)
    _util.enable_custom_widget_manager_once.cache_clear()
    dashboard = Dashboard()
    try:
        assert enabled == [True]
        data, metadata = dashboard._repr_mimebundle_()
        assert metadata == {
            "application/vnd.jupyter.widget-view+json": {
                "colab": {"custom_widget_manager": {"url": url}}
            }
        }
        assert "text/html" in data  # the static view, for a front-end without the manager
    finally:
        dashboard.close()
        _util.enable_custom_widget_manager_once.cache_clear()
