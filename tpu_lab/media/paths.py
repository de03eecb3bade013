"""Where a preview may be saved.

The rule: ``save=`` is a path whose extension names the format (stills ``.png``, ``.jpg``,
``.jpeg``, ``.webp``; videos ``.mp4``, ``.webp``, ``.gif``). It must stay inside the *save
folder*: the folder set with :func:`save_policy` / :func:`set_save_policy`, else the current
working directory. Relative paths are taken inside that folder; ``..`` anywhere is refused; an
absolute path (or a symlink) that leads outside it is refused unless ``allow_outside=True``
was set. The parent folder must already exist (nothing is created); an existing file is
replaced.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ..errors import MediaError

STILL_FORMATS = {".png": "PNG", ".jpg": "JPEG", ".jpeg": "JPEG", ".webp": "WEBP"}
VIDEO_FORMATS = {".mp4": "mp4", ".webp": "webp", ".gif": "gif"}


@dataclass(frozen=True)
class SavePolicy:
    """``base``: the save folder (``None``: the current directory when saving);
    ``allow_outside``: accept absolute paths outside it."""

    base: Path | None = None
    allow_outside: bool = False

    def folder(self) -> Path:
        return (self.base or Path.cwd()).resolve()


_policy = SavePolicy()


def current_policy() -> SavePolicy:
    return _policy


def set_save_policy(base: str | os.PathLike | None = None, *, allow_outside: bool = False):
    """Set the save folder for this process; returns the previous :class:`SavePolicy`."""
    global _policy
    if base is not None and not Path(base).is_dir():
        raise MediaError(f"The save folder {str(base)!r} does not exist or is not a folder.")
    previous = _policy
    _policy = SavePolicy(Path(base) if base is not None else None, allow_outside)
    return previous


@contextlib.contextmanager
def save_policy(
    base: str | os.PathLike | None = None, *, allow_outside: bool = False
) -> Iterator[SavePolicy]:
    """The save folder inside a ``with`` block (restored afterwards, also on errors)."""
    previous = set_save_policy(base, allow_outside=allow_outside)
    try:
        yield _policy
    finally:
        set_save_policy(previous.base, allow_outside=previous.allow_outside)


def resolve_save_path(save: str | os.PathLike, kind: str) -> tuple[Path, str]:
    """Check ``save`` for a ``kind`` ("image" or "video") preview; returns (path, format)."""
    if not isinstance(save, str | os.PathLike):
        raise MediaError(f"save must be a file path such as 'out.png', got {save!r}.")
    text = os.fspath(save)
    formats = VIDEO_FORMATS if kind == "video" else STILL_FORMATS
    allowed = ", ".join(formats)
    path = Path(text)
    suffix = path.suffix.lower()
    if not suffix:
        raise MediaError(f"save={text!r} has no file extension: end it with one of {allowed}.")
    if suffix not in formats:
        article = "an" if kind[0] in "aeiou" else "a"
        raise MediaError(
            f"save={text!r}: {article} {kind} cannot be saved as {suffix}; use {allowed}."
        )
    policy = current_policy()
    folder = policy.folder()
    if ".." in path.parts:
        raise MediaError(
            f"save={text!r} contains '..': name a file inside the save folder {folder}."
        )
    target = path if path.is_absolute() else folder / path
    if not policy.allow_outside and not target.resolve().is_relative_to(folder):
        raise MediaError(
            f"save={text!r} is outside the save folder {folder}: save inside it, or allow "
            f"it with tpu_lab.media.save_policy(allow_outside=True)."
        )
    if target.is_dir():
        raise MediaError(f"save={text!r} is a folder: name a file in it, e.g. preview{suffix}.")
    if not target.parent.is_dir():
        raise MediaError(
            f"save={text!r}: the folder {target.parent} does not exist; create it first "
            f"(os.makedirs) or save elsewhere."
        )
    return target, formats[suffix]
