"""Colab: where tpu-lab is installed from, the notebooks' setup cell, and which runtime this is.

tpu-lab is not published on PyPI. A ``pip install tpu-lab`` would install whatever someone
registers under that name, in every reader's runtime, so the notebooks install from the
project's home, named once in pyproject.toml's ``[project.urls]`` (:mod:`tpu_lab._install`).
The setup cell is self-contained (tpu_lab is not importable before it runs: it carries the
address as written when the cell was made) and keeps a preinstalled torch that tpu-lab supports.

Colab is recognised as colabtools recognises itself: its package ``google.colab`` is importable
and its kernel has ``COLAB_RELEASE_TAG`` set (colabtools' build-info handler reads it). The
runtime's accelerator is read from the machine, as colabtools' resource monitor does for GPUs
(``nvidia-smi`` on the PATH) and as tpu_lab does for TPU chips (``/dev/accel*``, ``/dev/vfio/N``).
"""

from __future__ import annotations

import importlib.util
import os
import shutil

from . import _install

#: The torch versions tpu-lab supports (pyproject.toml's dependency; a test keeps them equal).
TORCH_REQUIREMENT = ">=2.11,<2.15"
_LOWEST, _BEYOND = (2, 11), (2, 15)


_SETUP = '''\
# Setup: installs tpu_lab from its repository in Colab or any fresh environment (it is not on
# PyPI; a package there under that name would not be this project's); does nothing where it is
# installed. A preinstalled torch {range} is kept.
import importlib.util

if importlib.util.find_spec("tpu_lab") is None:
    import importlib.metadata
    import sys

    try:
        torch_version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        torch_version = None
    minor = tuple(int(n) for n in (torch_version or "0.0").split("+")[0].split(".")[:2])
    if {lowest} <= minor < {beyond}:
        print(f"Installing tpu-lab from {repository}, keeping torch {{torch_version}}.")
        keep = f"torch=={{torch_version}}"
    else:
        found = f"torch {{torch_version}} is" if torch_version else "no torch is"
        print(f"{{found}} installed; tpu-lab needs torch{range}. pip now installs the newest "
              "torch in that range (on a GPU runtime its CUDA build: several GB). If this "
              "session has imported torch already, restart it afterwards "
              "(Runtime > Restart session) and run the notebook again.")
        keep = ""
    %pip install --quiet "{requirement}" {{keep}}
    # pip builds tpu-lab without torch in sight: compile the device's core now (about two
    # minutes; it says what to install where no C++ compiler is found)
    !{{sys.executable}} -m tpu_lab build-core --if-needed'''


def setup_cell(extras: tuple[str, ...], source_url: str | None = None) -> str:
    """The first code cell of every teaching notebook."""
    return _SETUP.format(
        range=TORCH_REQUIREMENT,
        lowest=_LOWEST,
        beyond=_BEYOND,
        repository=_install.home() if source_url is None else source_url,
        requirement=_install.requirement(extras, source_url),
    )


def in_colab() -> bool:
    """True in a Colab kernel: ``google.colab`` importable and ``COLAB_RELEASE_TAG`` set."""
    if "COLAB_RELEASE_TAG" not in os.environ:
        return False
    try:
        return importlib.util.find_spec("google.colab") is not None
    except ModuleNotFoundError:  # no ``google`` package at all
        return False


def accelerator() -> str:
    """``"tpu"``, ``"gpu"`` or ``"cpu"``: what this machine has."""
    from .runtime.select import tpu_hardware_present

    if tpu_hardware_present():
        return "tpu"
    return "gpu" if shutil.which("nvidia-smi") else "cpu"
