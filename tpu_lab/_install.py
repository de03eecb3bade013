"""Where tpu-lab is installed from, and the install line every hint shows.

tpu-lab is not published on PyPI: a ``pip install tpu-lab`` would install whatever someone
registers under that name. The project's home is named once, in pyproject.toml's
``[project.urls]``, and read here from the installed package's metadata (from pyproject.toml
itself where tpu_lab runs from a source tree that pip has not installed). Every install hint is
built from it: pip's direct reference ``tpu-lab[extras] @ git+<home>``, or, in a git checkout
of the project (an editable install), ``pip install -e ".[extras]"``.
"""

from __future__ import annotations

import functools
import importlib.metadata
import tomllib
from pathlib import Path

DIST = "tpu-lab"
#: The key of the project's home in ``[project.urls]``.
HOME_KEY = "Homepage"
_SOURCE_TREE = Path(__file__).resolve().parent.parent


@functools.cache
def home() -> str:
    """The project's home, ``https://…`` (``[project.urls]`` in pyproject.toml)."""
    pyproject = _SOURCE_TREE / "pyproject.toml"
    if checkout() is not None and pyproject.is_file():
        return tomllib.loads(pyproject.read_text())["project"]["urls"][HOME_KEY]
    for entry in importlib.metadata.metadata(DIST).get_all("Project-URL") or ():
        key, _, url = entry.partition(",")
        if key.strip() == HOME_KEY:
            return url.strip()
    raise LookupError(f"{DIST}'s metadata names no {HOME_KEY} in [project.urls]")


def checkout() -> Path | None:
    """The git checkout of the project that tpu_lab is imported from, if it is one."""
    if (_SOURCE_TREE / ".git").exists() and (_SOURCE_TREE / "pyproject.toml").is_file():
        return _SOURCE_TREE
    return None


def source() -> str:
    """pip's form of :func:`home` (``git+https://…``)."""
    return f"git+{home()}"


def requirement(extras: tuple[str, ...] = (), source_url: str | None = None) -> str:
    """``tpu-lab[extras] @ <source>``: a direct reference, so pip never looks the name up."""
    name = f"{DIST}[{','.join(extras)}]" if extras else DIST
    return f"{name} @ {source_url or source()}"


def hint(*extras: str, flags: str = "") -> str:
    """The command that installs tpu-lab with ``extras``: ``pip install -e ".[lab]"`` in a
    checkout, else ``pip install "tpu-lab[lab] @ git+<home>"``; ``flags`` go before it."""
    pip = f"pip install {flags} " if flags else "pip install "
    if checkout() is not None:
        return pip + (f'-e ".[{",".join(extras)}]"' if extras else '-e "."')
    return pip + f'"{requirement(extras)}"'
