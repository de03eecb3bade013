"""The packages of tpu_lab depend one way: no two import each other, counting every import
statement (those inside functions too) and every tpu_lab module named as text (what
``importlib.import_module`` is handed); docs/architecture.md lists the layers of the
import-linter contract in pyproject.toml (``lint-imports``, run by ``make test``, checks the
contract itself)."""

from __future__ import annotations

import ast
import re
import tomllib
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_imports(package: Path) -> dict[tuple[str, str], list[str]]:
    """(importing package, imported package) -> where, for the top-level packages (and
    modules) of ``package``: every ``import``/``from`` statement and every string constant
    that names one of its modules."""
    files = sorted(package.rglob("*.py"))
    modules = {_module_name(f, package) for f in files}
    top = package.name
    edges: dict[tuple[str, str], list[str]] = defaultdict(list)

    def part(module: str) -> str | None:
        pieces = module.split(".")
        return pieces[1] if len(pieces) > 1 and pieces[0] == top else None

    for f in files:
        here = _module_name(f, package)
        base = here.split(".") if f.name == "__init__.py" else here.split(".")[:-1]
        for node in ast.walk(ast.parse(f.read_text(), str(f))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    start = base[: len(base) - node.level + 1]
                    source = ".".join(start + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                targets = [f"{source}.{a.name}" if f"{source}.{a.name}" in modules else source
                           for a in node.names]
            elif isinstance(node, ast.Constant) and node.value in modules:
                targets = [node.value]
            for target in targets:
                a, b = part(here), part(target)
                if a and b and a != b:
                    edges[(a, b)].append(f"{here}:{node.lineno} -> {target}")
    return edges


def mutual(edges: dict[tuple[str, str], list[str]]) -> list[str]:
    return [f"{a} <-> {b}: {edges[(a, b)][0]}; {edges[(b, a)][0]}"
            for a, b in sorted(edges) if a < b and (b, a) in edges]


def test_no_two_packages_import_each_other():
    edges = package_imports(ROOT / "tpu_lab")
    assert ("device", "estimate") in edges  # the graph sees imports inside functions too
    assert mutual(edges) == []


def test_the_check_finds_packages_that_import_each_other(tmp_path):
    pkg = tmp_path / "pkg"
    for name, source in {
        "__init__.py": "",
        "low/__init__.py": "def f():\n    from ..high import g\n",  # inside a function
        "high/__init__.py": "import importlib\nimportlib.import_module('pkg.low')\n",
        "other.py": "from .low import f\n",
    }.items():
        (pkg / name).parent.mkdir(parents=True, exist_ok=True)
        (pkg / name).write_text(source)
    edges = package_imports(pkg)
    assert set(edges) == {("low", "high"), ("high", "low"), ("other", "low")}
    assert mutual(edges) == [
        "high <-> low: pkg.high:2 -> pkg.low; pkg.low:2 -> pkg.high"
    ]


def _contract_layers() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (layers,) = [c for c in config["contracts"] if c["type"] == "layers"]
    return layers["layers"]


def test_the_architecture_page_lists_the_contracts_layers():
    page = (ROOT / "docs" / "architecture.md").read_text()
    block = page.split("## The layers, top first", 1)[1].split("```text\n", 1)[1]
    listed = [re.sub(r"^L\d+\s+", "", line) for line in block.split("```", 1)[0].splitlines()]
    assert listed == _contract_layers()

