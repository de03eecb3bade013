"""The render protocol: one model object, rendered as text/plain and text/html."""

from __future__ import annotations

import html
import shutil


class View:
    """Subclasses implement :meth:`to_text` and :meth:`to_html` from the same data."""

    def to_text(self, width: int | None = None) -> str:
        raise NotImplementedError

    def to_html(self) -> str:
        raise NotImplementedError

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict[str, str]:
        return {"text/plain": self.to_text(), "text/html": self.to_html()}

    def __str__(self) -> str:
        return self.to_text()

    def __repr__(self) -> str:
        return self.to_text()


def terminal_width(width: int | None) -> int:
    return width or min(shutil.get_terminal_size((100, 24)).columns, 120)


def clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(width - 1, 0)] + "…"


def esc(value: object) -> str:
    return html.escape(str(value), quote=True)
