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


_cell: dict[int, int] = {}  # id(shell) -> the running cell's number


def _watch(shell) -> None:
    """Remember each cell's number as it starts (IPython has already counted it then)."""

    def pre_run_cell(info) -> None:
        count = shell.execution_count
        _cell[id(shell)] = count - 1 if info.store_history else count

    shell.events.register("pre_run_cell", pre_run_cell)
    # the cell running now started before the hook existed: as a notebook cell, it was counted
    _cell[id(shell)] = shell.execution_count - 1


def ipython_cell() -> int | None:
    """The number (``In [N]``) of the running IPython cell, or ``None`` outside IPython."""
    shell_module = sys.modules.get("IPython")
    if shell_module is None:
        return None
    shell = shell_module.get_ipython()
    if shell is None:
        return None
    if id(shell) not in _cell:
        _watch(shell)
    return _cell[id(shell)]
