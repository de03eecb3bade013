"""Frames to browser-playable video: H.264 MP4 (yuv420p) with PyAV, animated WebP and GIF with
Pillow (the fallbacks when H.264 encoding is unavailable)."""

from __future__ import annotations

import io
import os
import tempfile
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np

from .. import _install
from ..errors import MediaError

#: x264 settings: constant quality 20 (visually clean), the "veryfast" speed preset.
CRF = 20
PRESET = "veryfast"


def _rgb_frames(frames: Sequence[Any]) -> list[np.ndarray]:
    """PIL images or (H, W, C) uint8 arrays -> RGB uint8 arrays, all of one size."""
    if len(frames) == 0:
        raise MediaError("A video needs at least one frame; got none.")
    out = []
    for f in frames:
        if hasattr(f, "convert"):
            arr = np.asarray(f.convert("RGB"))
        else:
            arr = np.asarray(f)
            if arr.dtype != np.uint8:
                raise MediaError(
                    f"Frames for encoding must be uint8 (H, W, 3) arrays or PIL images, got "
                    f"{arr.dtype}; use tpu_lab.media.preview(frames, layout='THWC') to convert."
                )
            if arr.ndim == 2:
                arr = np.repeat(arr[..., None], 3, axis=2)
            elif arr.shape[-1] == 1:
                arr = np.repeat(arr, 3, axis=2)
            elif arr.shape[-1] == 4:
                arr = arr[..., :3]
        out.append(np.ascontiguousarray(arr))
    sizes = {a.shape for a in out}
    if len(sizes) > 1:
        raise MediaError(f"All frames of a video must have one size, got {sorted(sizes)}.")
    return out


def check_fps(fps: float) -> float:
    if not isinstance(fps, int | float) or isinstance(fps, bool) or not 0 < fps <= 240:
        raise MediaError(f"fps={fps!r} is not a frame rate: use a number in (0, 240], e.g. 8.")
    return fps


def even_size(height: int, width: int) -> tuple[int, int]:
    """yuv420p needs even sides: odd ones get one more row/column (a copy of the edge)."""
    return height + height % 2, width + width % 2


def _pad_even(arr: np.ndarray) -> np.ndarray:
    h, w = arr.shape[:2]
    eh, ew = even_size(h, w)
    if (eh, ew) == (h, w):
        return arr
    return np.pad(arr, ((0, eh - h), (0, ew - w), (0, 0)), mode="edge")


def h264_unavailable() -> str | None:
    """Why H.264 cannot be encoded here (``None`` when it can)."""
    try:
        import av
    except ImportError:
        return f"PyAV is not installed ({_install.hint('video')})"
    try:
        av.codec.Codec("libx264", "w")
    except Exception as exc:  # av raises its own UnknownCodecError / FFmpegError
        return f"this FFmpeg build has no libx264 encoder ({exc})"
    return None


def encode_mp4(frames: Sequence[Any], fps: float = 8) -> bytes:
    """H.264 in MP4 (yuv420p, even sides, ``+faststart``): plays in every browser."""
    fps = check_fps(fps)
    reason = h264_unavailable()
    if reason:
        raise MediaError(f"Cannot encode H.264: {reason}. Use encode_webp or encode_gif.")
    rgb = [_pad_even(a) for a in _rgb_frames(frames)]
    height, width = rgb[0].shape[:2]
    # +faststart (the index first, so playback starts before the download ends) rewrites the
    # file in a second pass: FFmpeg needs a real file for that, not a Python buffer.
    with tempfile.TemporaryDirectory(prefix="tpu_lab_mp4_") as tmp:
        path = os.path.join(tmp, "video.mp4")
        _write_mp4(path, rgb, fps, width, height)
        with open(path, "rb") as f:
            return f.read()


def _write_mp4(path: str, rgb: list[np.ndarray], fps: float, width: int, height: int) -> None:
    import av

    with av.open(path, mode="w", format="mp4", options={"movflags": "+faststart"}) as out:
        stream = out.add_stream("libx264", rate=Fraction(fps).limit_denominator(1000))
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.options = {"crf": str(CRF), "preset": PRESET}
        for arr in rgb:
            frame = av.VideoFrame.from_ndarray(arr, format="rgb24").reformat(format="yuv420p")
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)


def _animated(frames: Sequence[Any], fps: float, fmt: str, **options: Any) -> bytes:
    from PIL import Image

    fps = check_fps(fps)
    images = [Image.fromarray(a, "RGB") for a in _rgb_frames(frames)]
    if fmt == "GIF":  # 256 colours per frame; Pillow's default quantizer is ~100x slower
        images = [
            im.quantize(256, method=Image.Quantize.FASTOCTREE, dither=Image.Dither.NONE)
            for im in images
        ]
    buffer = io.BytesIO()
    duration = max(1, round(1000 / fps))
    images[0].save(
        buffer, format=fmt, save_all=True, append_images=images[1:], duration=duration, loop=0,
        **options,
    )
    return buffer.getvalue()


def encode_webp(frames: Sequence[Any], fps: float = 8) -> bytes:
    """Animated WebP (lossy, quality 80, fastest method): the fallback browsers play as an
    image."""
    return _animated(frames, fps, "WEBP", quality=80, method=0)


def encode_gif(frames: Sequence[Any], fps: float = 8) -> bytes:
    """Animated GIF (256 colours): the last resort when WebP is unavailable."""
    return _animated(frames, fps, "GIF", optimize=False)


def webp_available() -> bool:
    from PIL import features

    return bool(features.check("webp"))


def encode_video(frames: Sequence[Any], fps: float = 8) -> tuple[bytes, str, str | None]:
    """The best format this machine can write: ``(data, "mp4"|"webp"|"gif", why_not_mp4)``."""
    reason = h264_unavailable()
    if reason is None:
        return encode_mp4(frames, fps), "mp4", None
    if webp_available():
        return encode_webp(frames, fps), "webp", reason
    return encode_gif(frames, fps), "gif", reason
