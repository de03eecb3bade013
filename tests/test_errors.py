"""Every exception tpu_lab raises on purpose is defined in tpu_lab/errors.py, derives from
TpuLabError and is reachable from the package root."""

from __future__ import annotations

import ast
from pathlib import Path

import tpu_lab
from tpu_lab import errors

PACKAGE = Path(tpu_lab.__file__).parent


def _exception_classes_outside_errors_py() -> list[str]:
    found = []
    for path in PACKAGE.rglob("*.py"):
        if path.name == "errors.py" and path.parent == PACKAGE:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                bases = {getattr(b, "id", getattr(b, "attr", "")) for b in node.bases}
                if any(b.endswith(("Error", "Exception")) for b in bases):
                    found.append(f"{path.relative_to(PACKAGE)}: {node.name}")
    return found


def test_public_exceptions_live_in_errors_py():
    assert _exception_classes_outside_errors_py() == []


def test_every_error_derives_from_tpulaberror_and_is_exported_from_the_root():
    classes = [v for v in vars(errors).values() if isinstance(v, type) and v.__module__ ==
               errors.__name__]  # fmt: skip
    assert len(classes) >= 10
    for cls in classes:
        assert issubclass(cls, errors.TpuLabError), cls
        assert getattr(tpu_lab, cls.__name__) is cls, cls
        assert cls.__name__ in tpu_lab.__all__, cls
