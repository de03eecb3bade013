"""The bundled device's compiled core: built once per torch version, loaded through one
interface, and what doctor says about it."""

from __future__ import annotations

import pytest

import tpu_lab  # noqa: F401  (installs the "tpu" device)
from tpu_lab import device
from tpu_lab.device.core import Core, build
from tpu_lab.doctor import diagnose
from tpu_lab.errors import DeviceCoreError


def test_the_device_talks_to_the_core_through_its_interface():
    """Every method the Python side calls exists in the compiled module, and nothing else of
    the module is used (``Core`` lists it once)."""
    native = device.current().core
    wanted = {name for name in vars(Core) if not name.startswith("_")}
    assert wanted <= set(dir(native))
    assert wanted == {name for name in dir(native) if not name.startswith("_")}


def test_a_missing_core_is_built_or_explained(monkeypatch):
    from tpu_lab.device import core

    monkeypatch.setattr(build, "status", lambda: (False, "not built for torch X (run: x)"))
    with pytest.raises(DeviceCoreError, match=r"core is not built for torch X \(run: x\)"):
        core.load(build_if_needed=False)

    def fails(**kwargs):
        raise RuntimeError("Building tpu_lab's compiled device core failed. g++: not found")

    monkeypatch.setattr(build, "build", fails)
    with pytest.raises(DeviceCoreError, match="g\\+\\+: not found"):
        core.load()


def test_changed_sources_need_a_rebuild(monkeypatch):
    built, _ = build.status()
    if not built:
        pytest.skip("the compiled core is not built here")
    monkeypatch.setattr(build, "_fingerprint", lambda: "0" * 16)
    assert build.status() == (False, "built from older sources (run: tpu-lab build-core)")


def test_rebuilding_an_up_to_date_core_keeps_its_build_record():
    built, _ = build.status()
    if not built:
        pytest.skip("the compiled core is not built here")
    if build.build() is not None:  # this interpreter's command line differed: it did compile
        assert build.built_by().startswith("by tpu-lab build-core in ")
    record = build.built_by()
    assert build.build() is None  # ninja found nothing to do: the record says how it was built
    assert build.built_by() == record and build.status()[0]


def test_doctor_says_how_the_core_was_built():
    rows = dict(diagnose().rows)
    assert rows["device core"] == build.status()[1]
    assert rows["device core"].startswith("built for torch ")


class _App:
    def __init__(self):
        self.said: list[tuple[str, str]] = []

    def display_warning(self, text):
        self.said.append(("warning", text))

    def display_info(self, text):
        self.said.append(("info", text))


def _hook(monkeypatch, target="wheel"):
    pytest.importorskip("hatchling")
    monkeypatch.syspath_prepend(str(build._HERE.parents[2]))
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

    assert {"process", "modes", "compile_cache"} <= graph.keys() and "modes" in graph["process"]
    for name in sorted(graph):
        visit(name)
