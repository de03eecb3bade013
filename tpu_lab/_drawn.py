"""``str()`` of a data object is its picture's text; ``repr()`` stays the dataclass's.

The data classes (a plan, a mesh run, an estimate, the device's status...) sit in layers below
the views, which may not be imported from there. So the picture is found at call time: the
package root, above every layer, installs the one function that draws an object as text
(:func:`install`; it asks :func:`tpu_lab.views.view`), and a data class that derives from
:class:`Drawn` hands ``str()`` to it. Until something is installed, ``str()`` is ``repr()``.
"""

from __future__ import annotations

from collections.abc import Callable

_render: Callable[[object], str] | None = None


def install(render: Callable[[object], str]) -> None:
    """Draw data objects as text with ``render`` (the package root installs the views')."""
    global _render
    _render = render


class Drawn:
    """A data class whose ``str()`` is its picture's text (``print(plan)``)."""

    __slots__ = ()

    def __str__(self) -> str:
        return repr(self) if _render is None else _render(self)
