"""Colab: where tpu-lab is installed from, the notebooks' setup cell, and which runtime this is.

tpu-lab is not published on PyPI. A ``pip install tpu-lab`` would install whatever someone
registers under that name, in every reader's runtime, so the notebooks install from the
project's home, named once in pyproject.toml's ``[project.urls]`` (:mod:`tpu_lab._install`).
The setup cell is self-contained (tpu_lab is not importable before it runs: it carries the
address as written when the cell was made) and short: pip itself keeps a preinstalled torch that
tpu-lab's dependency allows, and the rest is ``python -m tpu_lab build-core``.

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


_SETUP = '''\
# Setup (Colab, a fresh environment): install tpu-lab where it is missing, from its repository
# (not PyPI; pip keeps an installed torch {range}), and build the device's C++ core.
import importlib.util
import sys

if importlib.util.find_spec("tpu_lab") is None:
    %pip install --quiet "{requirement}"
    !{{sys.executable}} -m tpu_lab build-core --if-needed
    if "torch" in sys.modules:
        print("torch was imported before this install: restart the session, then run on.")'''


def setup_cell(extras: tuple[str, ...], source_url: str | None = None) -> str:
    """The first code cell of every teaching notebook."""
    return _SETUP.format(range=TORCH_REQUIREMENT,
                         requirement=_install.requirement(extras, source_url))


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
