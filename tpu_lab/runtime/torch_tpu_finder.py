"""``import torch_tpu`` where TorchTPU is not installed: tpu_lab's stand-in, never over a real one.

TorchTPU's tutorials start with ``from torch_tpu import api`` (and import its execution-mode,
sync, profiler and utility modules). Where torch-tpu is installed, those imports reach it and
this module does nothing. Everywhere else, :func:`install` (run by ``import tpu_lab``) appends a
finder to the *end* of ``sys.meta_path``: Python asks it only after every other finder failed to
find ``torch_tpu``, and it answers only if no ``torch-tpu`` distribution is installed. It then
loads the package in ``tpu_lab/standin/_torch_tpu/`` under the name ``torch_tpu``; its submodules
(``torch_tpu.api``, ``torch_tpu._internal.profiler``...) are found through that package's
``__path__``. The stand-in says what it is: ``repr(torch_tpu)``, ``torch_tpu.__file__`` (inside
tpu_lab) and ``tpu-lab doctor``. ``TPU_LAB_TORCH_TPU_STANDIN=0`` (read at install) turns it off.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.metadata
import importlib.util
import os
import sys
from pathlib import Path

#: Environment variable: ``0`` leaves ``import torch_tpu`` failing where TorchTPU is absent
#: (no stand-in); default ``1``.
STANDIN_ENV = "TPU_LAB_TORCH_TPU_STANDIN"
#: The folder whose package is loaded as ``torch_tpu``.
PACKAGE_DIR = Path(__file__).parents[1] / "standin" / "_torch_tpu"
#: TorchTPU's version whose public API the stand-in mirrors.
MIRRORS = "0.2.0"


def real_distribution() -> str | None:
    """The installed torch-tpu version, or ``None``."""
    try:
        return importlib.metadata.version("torch-tpu")
    except importlib.metadata.PackageNotFoundError:
        return None


class StandinFinder(importlib.abc.MetaPathFinder):
    """Finds ``torch_tpu`` in tpu_lab's stand-in package, only when nothing else has it."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "torch_tpu" or real_distribution() is not None:
            return None
        return importlib.util.spec_from_file_location(
            "torch_tpu",
            PACKAGE_DIR / "__init__.py",
            submodule_search_locations=[str(PACKAGE_DIR)],
        )


_FINDER = StandinFinder()


def install() -> bool:
    """Append the finder to ``sys.meta_path`` (idempotent); ``False`` when switched off."""
    if os.environ.get(STANDIN_ENV, "1") == "0":
        return False
    if _FINDER not in sys.meta_path:
        sys.meta_path.append(_FINDER)
    return True


def is_standin(module) -> bool:
    """True for the stand-in ``torch_tpu`` package (or one of its modules)."""
    return bool(getattr(module, "__tpu_lab_standin__", False))


def real_spec():
    """The spec of a real ``torch_tpu`` package, looked up by every finder but this one."""
    for finder in sys.meta_path:
        if finder is _FINDER or not hasattr(finder, "find_spec"):
            continue
        spec = finder.find_spec("torch_tpu", None)
        if spec is not None:
            return spec
    return None


def state() -> str:
    """``'standin'`` (loaded), ``'available'`` (``import torch_tpu`` would load it), ``'off'``
    or ``'shadowed'`` (a real torch-tpu is installed, which imports win)."""
    module = sys.modules.get("torch_tpu")
    if module is not None and is_standin(module):
        return "standin"
    if real_distribution() is not None or real_spec() is not None:
        return "shadowed"
    return "available" if _FINDER in sys.meta_path else "off"


def describe() -> str:
    """One line for ``tpu-lab doctor``."""
    return {
        "standin": f"loaded: tpu_lab's stand-in (TorchTPU {MIRRORS} API on the bundled device)",
        "available": "import torch_tpu loads tpu_lab's stand-in (TorchTPU absent)",
        "shadowed": "not used: the real torch-tpu is installed",
        "off": f"off ({STANDIN_ENV}=0 or tpu_lab not imported)",
    }[state()]
