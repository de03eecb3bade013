"""Building the compiled core, and knowing whether it is built.

The core is compiled once per torch version into ``_build/`` beside this file: by ``pip
install`` where the build can import torch (``hatch_build.py``: ``--no-build-isolation``, as
``make run`` and ``make test`` install), else by ``tpu-lab build-core``, else by the first
``import tpu_lab`` (:func:`tpu_lab.device.core.load`). This module imports only torch and the
standard library, so that the build hook can load it by path without starting the device.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

_NAME = "tpu_lab_core"
_SOURCES = ("hbm.cpp", "runtime.cpp", "kernels.cpp", "opcache.cpp", "oplog.cpp", "unsigned.cpp",
            "module.cpp")
_HERE = Path(__file__).resolve().parent


def _fingerprint() -> str:
    digest = hashlib.sha256(f"torch {torch.__version__} python {sys.version}".encode())
    for name in (*_SOURCES, "core.h", "hashing.h", "opcache.h", "oplog.h"):
        digest.update((_HERE / "csrc" / name).read_bytes())
    return digest.hexdigest()[:16]


def build_dir() -> Path:
    """Where the compiled core of this torch version lives."""
    return _HERE / "_build" / f"torch-{torch.__version__}"


def _library() -> Path:
    return build_dir() / f"{_NAME}.so"


def _stamp() -> Path:
    return build_dir() / "sources.sha256"


def _record() -> Path:
    return build_dir() / "build.json"


def artifacts() -> tuple[Path, ...]:
    """The files a build leaves that a wheel must carry: the library, its sources' stamp and
    the build record."""
    return _library(), _stamp(), _record()


def built_by() -> str:
    """How and in how long the built core was compiled (``""`` when unknown)."""
    try:
        record = json.loads(_record().read_text())
        return f"by {record['how']} in {record['seconds']:.0f} s"
    except (OSError, ValueError, KeyError):
        return ""


def status() -> tuple[bool, str]:
    """Whether an up-to-date compiled core is built, and if not, why."""
    if not _library().exists():
        return False, f"not built for torch {torch.__version__} (run: tpu-lab build-core)"
    if not _stamp().exists() or _stamp().read_text().strip() != _fingerprint():
        return False, "built from older sources (run: tpu-lab build-core)"
    return True, " ".join(filter(None, (f"built for torch {torch.__version__}", built_by())))


_BUILD_SCRIPT = """
import sys
from torch.utils.cpp_extension import load
load({name!r}, sources={sources!r}, build_directory={directory!r}, extra_cflags=["-O2"],
     verbose={verbose!r})
"""


def build(verbose: bool = False, how: str = "tpu-lab build-core") -> float | None:
    """Compile the core (in a child process: loading it registers the device). Returns the
    seconds it took (recorded, with ``how``, for ``tpu-lab doctor``), or ``None`` when the
    library was already up to date (ninja relinked nothing: the earlier record stays); raises
    ``RuntimeError`` with the compiler's output when it fails."""
    directory = build_dir()
    directory.mkdir(parents=True, exist_ok=True)
    before = _library().stat().st_mtime_ns if _library().exists() else None
    script = _BUILD_SCRIPT.format(
        name=_NAME,
        sources=[str(_HERE / "csrc" / s) for s in _SOURCES],
        directory=str(directory),
        verbose=verbose,
    )
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=not verbose,
        text=True,
        env={
            **os.environ,
            "TORCH_DEVICE_BACKEND_AUTOLOAD": "0",
            # ninja from pip lives beside this interpreter, which may not be on PATH
            "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]),
        },
    )
    if done.returncode != 0:
        raise RuntimeError(
            "Building tpu_lab's compiled device core failed. A C++ compiler and ninja are needed "
            "(Debian/Ubuntu: apt-get install g++; macOS: xcode-select --install; ninja comes "
            "with tpu-lab); the compiler said:\n"
            + (done.stderr or "")[-4000:]
        )
    seconds = time.perf_counter() - start
    _stamp().write_text(_fingerprint())
    if before == _library().stat().st_mtime_ns and _record().exists():
        return None
    _record().write_text(json.dumps({"how": how, "seconds": round(seconds, 1)}) + "\n")
    return seconds


def load():
    """Import the compiled core's Python module (registers the device's C++ parts)."""
    spec = importlib.util.spec_from_file_location(
        _NAME, _library(), loader=importlib.machinery.ExtensionFileLoader(_NAME, str(_library()))
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
