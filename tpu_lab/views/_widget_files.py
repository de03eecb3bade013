"""Where the live widgets' front-end files are: ``widgets/`` at the top of a source checkout,
shipped in the wheel as ``tpu_lab/_widgets/`` (pyproject's force-include)."""

from __future__ import annotations

from pathlib import Path

from .. import _install


def widget_file(name: str) -> Path:
    """A front-end file: packaged in the wheel as ``tpu_lab/_widgets/``, in a source checkout the
    top-level ``widgets/`` (loaded by path, so anywidget hot-reloads it with ANYWIDGET_HMR=1)."""
    package = Path(__file__).resolve().parent.parent
    for folder in (package / "_widgets", package.parent / "widgets"):
        if (folder / name).is_file():
            return folder / name
    raise FileNotFoundError(
        f"The widget file {name!r} is missing from {package / '_widgets'} and "
        f"{package.parent / 'widgets'}; reinstall tpu-lab "
        f"({_install.hint(flags='--force-reinstall')})."
    )
