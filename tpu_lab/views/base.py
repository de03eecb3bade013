"""The render protocol: one model object, rendered as text/plain and text/html."""

from __future__ import annotations

import html
import re
import shutil


class View:
    """Subclasses implement :meth:`to_text` and :meth:`to_html` from the same data."""

    def to_text(self, width: int | None = None) -> str:
        raise NotImplementedError

    def to_html(self) -> str:
        raise NotImplementedError

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict[str, str]:
        return {"text/plain": self.to_text(), "text/html": notebook_html(self.to_html())}

    def __str__(self) -> str:
        return self.to_text()

    def __repr__(self) -> str:
        return self.to_text()


def notebook_html(markup: str) -> str:
    """``markup`` as a notebook shows it: table cells left-aligned (:func:`align_left`) and
    never typeset as LaTeX. JupyterLab, Notebook 7 and the docs' notebook pages run MathJax over
    rendered HTML, which reads the text between two dollar signs ("$0.07 per step at $1.20 per
    chip-hour") as a formula; MathJax skips an element of the class ``tex2jax_ignore`` (MathJax
    2 and 3) or ``mathjax_ignore`` (MathJax 3's own name) and all inside it."""
    return f"<div class='tex2jax_ignore mathjax_ignore'>{align_left(markup)}</div>"


_CELL = re.compile(r"<(td|th)\b([^>]*)>")
_STYLE = re.compile(r"""style=(['"])""")


def align_left(markup: str) -> str:
    """Table cells read left-aligned unless their own style says otherwise (JupyterLab's and
    nbconvert's style sheets right-align every cell of rendered HTML)."""

    def left(match: re.Match) -> str:
        tag, attributes = match.groups()
        if _STYLE.search(attributes):
            attributes = _STYLE.sub(lambda m: f"style={m.group(1)}text-align:left;", attributes, 1)
        else:
            attributes += " style='text-align:left'"
        return f"<{tag}{attributes}>"

    return _CELL.sub(left, markup)


def terminal_width(width: int | None) -> int:
    return width or min(shutil.get_terminal_size((100, 24)).columns, 120)


def clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(width - 1, 0)] + "…"


def esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def counted(n: int, word: str) -> str:
    """``1 chip``, ``2 chips``, ``2 cache misses``."""
    return f"{n} {word}" + ("" if n == 1 else "es" if word.endswith("s") else "s")
