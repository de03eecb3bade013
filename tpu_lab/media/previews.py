"""``preview(x)``: an image, a grid or an inline video (a :class:`Preview`; its picture, text
and HTML with the PNG or the video inline, is :class:`tpu_lab.views.preview.PreviewView`)."""

from __future__ import annotations

import io
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import MediaError
from .convert import Media, to_media
from .grid import display_scale, grid
from .paths import VIDEO_FORMATS, resolve_save_path
from .video import check_fps, encode_gif, encode_video, encode_webp


def _labels(labels: Any, n: int) -> list[str] | None:
    if labels is None:
        return None
    if isinstance(labels, str):
        labels = [labels]
    try:
        items = [str(label) for label in labels]
    except TypeError:
        raise MediaError(
            f"labels must be a list with one label per image, got {labels!r}."
        ) from None
    if len(items) != n:
        raise MediaError(
            f"labels has {len(items)} entries but the batch has {n} images: give one label per "
            f"image."
        )
    return items


class Preview:
    """A still (``image``: a PIL image, a grid for batches) or a video (``frames``, ``data``
    encoded as ``format`` "mp4", or "webp"/"gif" where H.264 is unavailable), with what it was
    made from (``media``) and where it was saved (``saved``)."""

    def __init__(self, media: Media, *, labels: Sequence[Any] | None = None, fps: float = 8):
        self.media = media
        self.kind = "video" if media.video else "image"
        self.labels = _labels(labels, media.batch)
        self.fps = check_fps(fps)
        self.scale = display_scale([a for step in media.frames for a in step])
        self.saved: Path | None = None
        self.image = None
        self.frames: list = []
        self.data = b""
        self.format = "png"
        self.fallback_reason: str | None = None
        if media.video:
            self.frames = [grid(step, self.labels, self.scale) for step in media.frames]
            self.data, self.format, self.fallback_reason = encode_video(self.frames, self.fps)
        else:
            self.image = grid(media.frames[0], self.labels, self.scale)

    @property
    def size(self) -> tuple[int, int]:
        """(width, height) of the picture or of each video frame."""
        return (self.image or self.frames[0]).size

    def png(self) -> bytes:
        """The still as PNG bytes (for a video: its last frame)."""
        buffer = io.BytesIO()
        (self.image or self.frames[-1]).save(buffer, format="PNG")
        return buffer.getvalue()

    def save(self, path: str | os.PathLike) -> Path:
        """Write to ``path`` (checked by the save rule of :mod:`tpu_lab.media.paths`)."""
        target, fmt = resolve_save_path(path, self.kind)
        if self.kind == "image":
            image = self.image
            if fmt == "JPEG" and image.mode not in ("L", "RGB"):
                image = image.convert("RGB")
            image.save(target, format=fmt)
        else:
            target.write_bytes(self._video_bytes(fmt, str(path)))
        self.saved = target
        return target

    def _video_bytes(self, fmt: str, path: str) -> bytes:
        if fmt == self.format:
            return self.data
        if fmt == "mp4":
            raise MediaError(
                f"save={path!r}: H.264 encoding is unavailable ({self.fallback_reason}); save "
                f"as .webp or .gif instead."
            )
        return encode_webp(self.frames, self.fps) if fmt == "webp" else encode_gif(
            self.frames, self.fps
        )


def preview(
    x: Any,
    *,
    value_range: Any = None,
    layout: str | None = None,
    labels: Sequence[Any] | None = None,
    fps: float = 8,
    save: str | os.PathLike | None = None,
) -> Preview:
    """Show ``x`` inline: an image, a labelled grid for a batch, or an H.264 video for frames
    (a notebook draws the :class:`Preview` as its view; ``tpu_lab.view(p)`` elsewhere).

    ``x``: a PIL image, numpy array, torch tensor (any device), a list of them, a diffusers
    output (``.images`` or ``.frames``). ``value_range``: "0,1", "-1,1", "uint8", "minmax",
    (low, high) or ``None`` to detect; ``layout``: axis letters such as "CHW", "NHWC", "TCHW"
    (``None`` to detect); ``labels``: one per image of a batch; ``fps``: video frame rate;
    ``save``: a file to write (``.png``/``.jpg``/``.webp`` for images, ``.mp4``/``.webp``/
    ``.gif`` for video), checked by the rule in :mod:`tpu_lab.media.paths`. The detection rules
    are in :mod:`tpu_lab.media.convert`.
    """
    as_video = isinstance(save, str | os.PathLike) and Path(os.fspath(save)).suffix.lower() in (
        set(VIDEO_FORMATS) - {".webp"}  # .webp can be either
    )
    if save is not None:  # a path no preview can take fails before x is read (on "tpu": a sync)
        resolve_save_path(save, "video" if as_video else "image")
    media = to_media(x, value_range=value_range, layout=layout, video=as_video)
    if save is not None:
        resolve_save_path(save, "video" if media.video else "image")  # fail before encoding
    result = Preview(media, labels=labels, fps=fps)
    if save is not None:
        result.save(save)
    return result
