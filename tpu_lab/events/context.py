"""Where an event came from: the user's own ``file:line`` and the IPython cell."""

from __future__ import annotations

import os
import sys
import sysconfig

import torch

from ..bus import BUS
from . import cell_times

_LIBRARY_DIRS = tuple(
    {
        os.path.dirname(torch.__file__) + os.sep,
        os.path.dirname(os.path.dirname(__file__)) + os.sep,  # tpu_lab itself
        sysconfig.get_paths()["stdlib"] + os.sep,
        sysconfig.get_paths()["purelib"] + os.sep,
        sysconfig.get_paths()["platlib"] + os.sep,
    }
)

_TPU_LAB = os.path.dirname(os.path.dirname(__file__)) + os.sep
#: Folders that hold packages, longest first: a library file is named from its package down.
_PACKAGE_ROOTS = sorted(
    {
        sysconfig.get_paths()["purelib"] + os.sep,
        sysconfig.get_paths()["platlib"] + os.sep,
        sysconfig.get_paths()["stdlib"] + os.sep,
    },
    key=len,
    reverse=True,
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

    In IPython that is ``In[N]:line``, the cell's number as IPython shows it, never the
    temporary file IPython compiled the cell from (a machine path that means nothing to a reader).
    """
    frame = sys._getframe(skip)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not _is_library(filename):
            return location(filename, frame.f_lineno)
        frame = frame.f_back
    return None


def location(filename: str | None, line: int | None) -> str:
    """``file:line``, or ``In[N]:line`` when ``filename`` is an IPython cell; files of installed
    packages are named from the package down (``diffusers/models/unets/unet_2d.py``); ``?`` when
    there is no file (Dynamo's backward graphs)."""
    if not filename:
        return "?"
    cell = _cell_of_file(filename)
    if cell is not None:
        return f"In[{cell}]:{line}"
    for root in _PACKAGE_ROOTS:
        if filename.startswith(root):
            return f"{filename[len(root):]}:{line}"
    if filename.startswith(_TPU_LAB):  # an editable install
        return f"tpu_lab{os.sep}{filename[len(_TPU_LAB):]}:{line}"
    return f"{filename}:{line}"


def _cell_of_file(filename: str) -> int | None:
    """The cell number IPython compiled ``filename`` from, if it is a cell's file."""
    shell_module = sys.modules.get("IPython")
    shell = shell_module.get_ipython() if shell_module is not None else None
    if shell is None:
        return None
    return getattr(shell.compile, "_filename_map", {}).get(filename)


_cell: dict[int, int | None] = {}  # id(shell) -> the running cell's number (None: between cells)


def follow(shell) -> None:
    """Follow ``shell``'s cells (idempotent): remember each cell's number as it starts (IPython
    has already counted it then), and publish ``cell_finished`` on the event bus when it ends,
    while its number is still current (the event log collects the compilations Dynamo recorded
    lazily, so that they are events of *that* cell; the dashboard updates). Where someone asks
    (the dashboard), each cell is timed and its ops recorded too (:mod:`.cell_times`)."""
    if id(shell) in _cell:
        return

    def pre_run_cell(info) -> None:
        count = shell.execution_count
        _cell[id(shell)] = count - 1 if info.store_history else count
        cell_times.started(id(shell), _cell[id(shell)])

    def post_run_cell(result) -> None:
        cell_times.finished(id(shell), _cell[id(shell)])
        BUS.emit("cell_finished", cell=_cell[id(shell)])
        _cell[id(shell)] = None  # what happens between cells (widget clicks) is in no cell

    shell.events.register("pre_run_cell", pre_run_cell)
    shell.events.register("post_run_cell", post_run_cell)
    # the cell running now started before the hook existed: as a notebook cell, it was counted
    _cell[id(shell)] = shell.execution_count - 1


def ipython_cell() -> int | None:
    """The number (``In [N]``) of the running IPython cell, or ``None`` outside IPython and
    before ``%load_ext tpu_lab`` (or a dashboard) started following the cells: nothing else
    registers a hook with IPython."""
    shell_module = sys.modules.get("IPython")
    if shell_module is None:
        return None
    shell = shell_module.get_ipython()
    return None if shell is None else _cell.get(id(shell))
