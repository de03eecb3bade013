"""``preview(x)``: an image, a grid or an inline video, as a View (text, HTML, PNG)."""

from __future__ import annotations

import base64
import io
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..views.base import View, clip, esc, terminal_width
from .convert import Media, MediaError, to_media
from .grid import display_scale, grid
from .paths import VIDEO_FORMATS, resolve_save_path
from .video import _check_fps, encode_gif, encode_video, encode_webp

_MIME = {"mp4": "video/mp4", "webp": "image/webp", "gif": "image/gif"}
#: Videos narrower than this many CSS pixels are displayed enlarged (an integer factor, pixels
#: kept sharp) so that the player's controls do not cover them.
VIDEO_MIN_WIDTH = 256
_CAPTION = "font:12px ui-monospace,SFMono-Regular,Menlo,monospace;color:#4b5563;margin-top:2px"


def _format_bytes(n: int) -> str:
    return f"{n / 1024:.1f} KB" if n < 1024 * 1024 else f"{n / 1024 / 1024:.1f} MB"


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


class Preview(View):
    """A still (``image``: a PIL image, a grid for batches) or a video (``frames``, ``data``
    encoded as ``format`` "mp4", or "webp"/"gif" where H.264 is unavailable)."""

    def __init__(self, media: Media, *, labels: Sequence[Any] | None = None, fps: float = 8):
        self.media = media
        self.kind = "video" if media.video else "image"
        self.labels = _labels(labels, media.batch)
        self.fps = _check_fps(fps)
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

    # -- the View protocol --------------------------------------------------------------

    def _headline(self) -> str:
        w, h = self.size
        n = self.media.batch
        batch = f", grid of {n}" if n > 1 else ""
        shown = f", shown ×{self.scale}" if self.scale > 1 else ""
        if self.kind == "image":
            return f"image {w}×{h}{batch}{shown}"
        seconds = len(self.frames) / self.fps
        codec = "H.264 MP4" if self.format == "mp4" else f"animated {self.format.upper()}"
        return (
            f"video {len(self.frames)} frames {w}×{h} at {self.fps:g} fps ({seconds:.1f} s)"
            f"{batch}{shown}, {codec} {_format_bytes(len(self.data))}"
        )

    def _details(self) -> list[str]:
        m = self.media
        lines = [f"from {m.source}, layout {m.layout}"]
        if m.value_range is not None:
            values = f"values {m.stats[0]:.4g}..{m.stats[1]:.4g} -> " if m.stats else ""
            lines.append(f"{values}range {m.value_range.describe()}")
        if self.labels:
            lines.append("labels: " + ", ".join(self.labels))
        if self.fallback_reason:
            lines.append(f"no H.264: {self.fallback_reason}")
        lines.extend(m.notes)
        if self.saved is not None:
            lines.append(f"saved to {self.saved}")
        return lines

    def to_text(self, width: int | None = None) -> str:
        width = terminal_width(width)
        lines = [f"Preview: {self._headline()}", *(f"  {d}" for d in self._details())]
        return "\n".join(clip(line, width) for line in lines)

    def _data_uri(self) -> str:
        if self.kind == "image":
            return "data:image/png;base64," + base64.b64encode(self.png()).decode("ascii")
        return f"data:{_MIME[self.format]};base64," + base64.b64encode(self.data).decode("ascii")

    def to_html(self) -> str:
        w, h = self.size
        title = esc(self._headline())
        size = f"width='{w}' height='{h}'"
        if self.kind == "video" and self.format == "mp4":
            factor = -(-VIDEO_MIN_WIDTH // w)  # ceil
            if factor > 1:
                size = f"width='{w * factor}' height='{h * factor}'"
            body = (
                f"<video controls autoplay loop muted playsinline {size} "
                f"style='image-rendering:pixelated' src='{self._data_uri()}' "
                f"title='{title}'></video>"
            )
        else:
            body = (
                f"<img {size} style='image-rendering:pixelated' src='{self._data_uri()}' "
                f"alt='{title}'>"
            )
        caption = "<br>".join(esc(line) for line in [self._headline(), *self._details()])
        return (
            f"<figure class='tpu-lab-preview' style='margin:0'>{body}"
            f"<figcaption style='{_CAPTION}'>{caption}</figcaption></figure>"
        )

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict[str, str]:
        bundle = super()._repr_mimebundle_(include, exclude)
        if self.kind == "image":
            bundle["image/png"] = base64.b64encode(self.png()).decode("ascii")
        return bundle


def preview(
    x: Any,
    *,
    value_range: Any = None,
    layout: str | None = None,
    labels: Sequence[Any] | None = None,
    fps: float = 8,
    save: str | os.PathLike | None = None,
) -> Preview:
    """Show ``x`` inline: an image, a labelled grid for a batch, or an H.264 video for frames.

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
    media = to_media(x, value_range=value_range, layout=layout, video=as_video)
    if save is not None:
        resolve_save_path(save, "video" if media.video else "image")  # fail before encoding
    result = Preview(media, labels=labels, fps=fps)
    if save is not None:
        result.save(save)
    return result
