"""Where an event came from: the user's own ``file:line`` and the IPython cell."""

from __future__ import annotations

import os
import sys
import sysconfig

import torch

_LIBRARY_DIRS = tuple(
    {
        os.path.dirname(torch.__file__) + os.sep,
        os.path.dirname(os.path.dirname(__file__)) + os.sep,  # tpu_lab itself
        sysconfig.get_paths()["stdlib"] + os.sep,
        sysconfig.get_paths()["purelib"] + os.sep,
        sysconfig.get_paths()["platlib"] + os.sep,
    }
)


def _is_library(filename: str) -> bool:
    return (
        filename.startswith(_LIBRARY_DIRS)
        or filename.startswith("<frozen")
        or "site-packages" in filename
        or "dist-packages" in filename
    )


def user_frame(skip: int = 1) -> str | None:
    """``file:line`` of the innermost frame outside torch, tpu_lab and installed packages.

    In a notebook that is the cell's line (IPython names cell files ``<ipython-input-...>`` or
    ``/tmp/ipykernel_*/*.py``).
    """
    frame = sys._getframe(skip)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not _is_library(filename):
            return f"{filename}:{frame.f_lineno}"
        frame = frame.f_back
    return None


def ipython_cell() -> int | None:
    """The execution count of the running IPython cell, or ``None`` outside IPython."""
    shell_module = sys.modules.get("IPython")
    if shell_module is None:
        return None
    shell = shell_module.get_ipython()
    if shell is None:
        return None
    return shell.execution_count
