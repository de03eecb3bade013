"""A preview (:class:`tpu_lab.media.previews.Preview`) as text, and as HTML with the picture or
the video inline (``<video>`` for H.264, an animated image otherwise) and the PNG of a still."""

from __future__ import annotations

import base64

from ..media.previews import Preview
from .base import View, clip, esc, terminal_width

_MIME = {"mp4": "video/mp4", "webp": "image/webp", "gif": "image/gif"}
#: Videos narrower than this many CSS pixels are displayed enlarged (an integer factor, pixels
#: kept sharp) so that the player's controls do not cover them.
VIDEO_MIN_WIDTH = 256
_CAPTION = "font:12px ui-monospace,SFMono-Regular,Menlo,monospace;color:#4b5563;margin-top:2px"


def _format_bytes(n: int) -> str:
    return f"{n / 1024:.1f} KB" if n < 1024 * 1024 else f"{n / 1024 / 1024:.1f} MB"


class PreviewView(View):
    """The picture of a :class:`Preview`: headline, where it came from, how it was read."""

    def __init__(self, preview: Preview) -> None:
        self.preview = preview

    def _headline(self) -> str:
        p = self.preview
        w, h = p.size
        n = p.media.batch
        batch = f", grid of {n}" if n > 1 else ""
        shown = f", shown ×{p.scale}" if p.scale > 1 else ""
        if p.kind == "image":
            return f"image {w}×{h}{batch}{shown}"
        seconds = len(p.frames) / p.fps
        codec = "H.264 MP4" if p.format == "mp4" else f"animated {p.format.upper()}"
        return (
            f"video {len(p.frames)} frames {w}×{h} at {p.fps:g} fps ({seconds:.1f} s)"
            f"{batch}{shown}, {codec} {_format_bytes(len(p.data))}"
        )

    def _details(self) -> list[str]:
        p = self.preview
        m = p.media
        lines = [f"from {m.source}, layout {m.layout}"]
        if m.value_range is not None:
            values = f"values {m.stats[0]:.4g}..{m.stats[1]:.4g} -> " if m.stats else ""
            lines.append(f"{values}range {m.value_range.describe()}")
        if p.labels:
            lines.append("labels: " + ", ".join(p.labels))
        if p.fallback_reason:
            lines.append(f"no H.264: {p.fallback_reason}")
        lines.extend(m.notes)
        return lines

    def _saved(self) -> list[str]:
        saved = self.preview.saved
        return [] if saved is None else [f"saved to {saved}"]

    def to_text(self, width: int | None = None) -> str:
        width = terminal_width(width)
        lines = [f"Preview: {self._headline()}", *(f"  {d}" for d in self._details())]
        lines = [clip(line, width) for line in lines]
        # the path stays whole: one cut short with "…" cannot be opened
        return "\n".join([*lines, *(f"  {s}" for s in self._saved())])

    def _data_uri(self) -> str:
        p = self.preview
        if p.kind == "image":
            return "data:image/png;base64," + base64.b64encode(p.png()).decode("ascii")
        return f"data:{_MIME[p.format]};base64," + base64.b64encode(p.data).decode("ascii")

    def to_html(self) -> str:
        p = self.preview
        w, h = p.size
        title = esc(self._headline())
        size = f"width='{w}' height='{h}'"
        if p.kind == "video" and p.format == "mp4":
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
        lines = [self._headline(), *self._details(), *self._saved()]
        caption = "<br>".join(esc(line) for line in lines)
        return (
            f"<figure class='tpu-lab-preview' style='margin:0'>{body}"
            f"<figcaption style='{_CAPTION}'>{caption}</figcaption></figure>"
        )

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict[str, str]:
        bundle = super()._repr_mimebundle_(include, exclude)
        if self.preview.kind == "image":
            bundle["image/png"] = base64.b64encode(self.preview.png()).decode("ascii")
        return bundle
