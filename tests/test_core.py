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


def test_rebuilding_an_up_to_date_core_keeps_its_build_record():
    built, _ = core.status()
    if not built:
        pytest.skip("the compiled core is not built here")
    if core.build() is not None:  # this interpreter's command line differed: it did compile
        assert core.built_by().startswith("by tpu-lab build-core in ")
    record = core.built_by()
    assert core.build() is None  # ninja found nothing to do: the record says how it was built
    assert core.built_by() == record and core.status()[0]


def test_doctor_says_which_core_runs():
    rows = dict(diagnose().rows)
    assert rows["device core"] == f"{device.CORE.name} ({device.CORE.reason})"


class _App:
    def __init__(self):
        self.said: list[tuple[str, str]] = []

    def display_warning(self, text):
        self.said.append(("warning", text))

    def display_info(self, text):
        self.said.append(("info", text))


def _hook(monkeypatch, target="wheel"):
    pytest.importorskip("hatchling")
    monkeypatch.syspath_prepend(str(core._HERE.parent.parent))
    from hatch_build import CoreBuildHook

    hook = CoreBuildHook.__new__(CoreBuildHook)  # hatchling's constructor needs a project
    app = _App()
    monkeypatch.setattr(CoreBuildHook, "app", app)
    monkeypatch.setattr(CoreBuildHook, "target_name", target)
    return hook, app


def test_pip_install_without_torch_in_the_build_skips_the_core_and_says_how(monkeypatch):
    import importlib.util

    hook, app = _hook(monkeypatch)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    build_data = {"force_include": {}}
    hook.initialize("standard", build_data)
    assert build_data == {"force_include": {}}
    assert app.said[0][0] == "warning" and "tpu-lab build-core" in app.said[0][1]


def test_pip_install_build_failure_still_installs(monkeypatch):
    hook, app = _hook(monkeypatch)
    failed = type("Completed", (), {"returncode": 1, "stderr": "g++: not found"})()
    monkeypatch.setattr("subprocess.run", lambda *args, **kwargs: failed)
    build_data = {"force_include": {}}
    hook.initialize("standard", build_data)
    assert build_data == {"force_include": {}}
    assert app.said == [("warning", app.said[0][1])] and "g++: not found" in app.said[0][1]


def test_pip_install_skips_the_core_when_asked(monkeypatch):
    hook, app = _hook(monkeypatch)
    monkeypatch.setenv("TPU_LAB_BUILD_CORE", "0")
    build_data = {"force_include": {}}
    hook.initialize("standard", build_data)
    assert build_data == {"force_include": {}} and app.said == []


def _device_imports() -> dict[str, set[str]]:
    """Which modules of ``tpu_lab.device`` each of them imports, at the top or in a function."""
    import ast
    from pathlib import Path

    paths = list(Path(device.__file__).parent.glob("*.py"))
    names, graph = {p.stem for p in paths}, {}
    for path in paths:
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                found |= (
                    {node.module.split(".")[0]} if node.module else {a.name for a in node.names}
                )
        graph[path.stem] = found & names
    return graph


def test_the_device_modules_import_each_other_without_a_cycle():
    graph, done, path = _device_imports(), set(), []

    def visit(name):
        if name in path:
            cycle = [*path[path.index(name) :], name]
            pytest.fail(f"tpu_lab.device has an import cycle: {' -> '.join(cycle)}")
        if name in done:
            return
        path.append(name)
        for imported in sorted(graph[name]):
            visit(imported)
        path.pop()
        done.add(name)

    assert {"bridge", "modes", "compile_cache"} <= graph.keys() and "modes" in graph["bridge"]
    for name in sorted(graph):
        visit(name)
