"""tpu_lab.media.video: H.264 MP4 that decodes (PyAV) to the frames given; WebP/GIF fallbacks."""

from __future__ import annotations

import io

import av
import numpy as np
import pytest
from PIL import Image

from tpu_lab.errors import MediaError
from tpu_lab.media import encode_gif, encode_mp4, encode_webp
from tpu_lab.media import video as video_mod


def _frames(n=12, h=48, w=64):
    """Frames with a moving bright square on a dark background."""
    out = []
    for t in range(n):
        f = np.full((h, w, 3), 30, np.uint8)
        f[8:24, 4 + 3 * t : 20 + 3 * t] = (230, 200, 40)
        out.append(f)
    return out


def _decode(data: bytes):
    with av.open(io.BytesIO(data)) as container:
        stream = container.streams.video[0]
        codec, fmt = stream.codec_context.name, stream.codec_context.pix_fmt
        frames = [f.to_ndarray(format="rgb24") for f in container.decode(stream)]
        rate = stream.average_rate
    return codec, fmt, frames, rate


def test_mp4_decodes_to_frame_count_size_and_content():
    frames = _frames()
    data = encode_mp4(frames, fps=8)
    codec, fmt, decoded, rate = _decode(data)
    assert (codec, fmt) == ("h264", "yuv420p")
    assert len(decoded) == 12
    assert decoded[0].shape == (48, 64, 3)
    assert rate == 8
    # lossy, but close: mean absolute error of a few levels out of 255
    errors = [np.abs(a.astype(int) - b.astype(int)).mean() for a, b in zip(decoded, frames, strict=True)]
    assert max(errors) < 6
    # the square moved: decoded frames differ as the inputs do
    assert np.abs(decoded[0].astype(int) - decoded[-1].astype(int)).mean() > 10


def test_mp4_has_its_index_first_for_streaming():
    data = encode_mp4(_frames(3), fps=8)
    assert data[4:8] == b"ftyp"
    assert data.index(b"moov") < data.index(b"mdat")


def test_odd_sizes_are_padded_to_even():
    frames = [f[:35, :51] for f in _frames(4)]
    _, _, decoded, _ = _decode(encode_mp4(frames, fps=5))
    assert len(decoded) == 4 and decoded[0].shape == (36, 52, 3)


def test_pil_grey_and_rgba_frames():
    frames = [Image.new("L", (20, 10), v) for v in (0, 255)]
    frames += [Image.new("RGBA", (20, 10), (255, 0, 0, 128))]
    _, _, decoded, _ = _decode(encode_mp4(frames, fps=2))
    assert len(decoded) == 3
    assert decoded[1].mean() > 240 and decoded[2][..., 0].mean() > 200


def test_fractional_fps():
    _, _, decoded, rate = _decode(encode_mp4(_frames(3), fps=2.5))
    assert len(decoded) == 3 and float(rate) == 2.5


def test_webp_and_gif_frames():
    frames = _frames(6)
    for data, fmt in ((encode_webp(frames, fps=10), "WEBP"), (encode_gif(frames, fps=10), "GIF")):
        img = Image.open(io.BytesIO(data))
        assert img.format == fmt
        assert img.n_frames == 6 and img.size == (64, 48)
        img.seek(1)
        img.load()
        assert img.info["duration"] == 100
        assert img.info["loop"] == 0


def test_encode_errors_exact_text():
    with pytest.raises(MediaError) as err:
        encode_mp4([], fps=8)
    assert str(err.value) == "A video needs at least one frame; got none."
    with pytest.raises(MediaError) as err:
        encode_mp4(_frames(2), fps=0)
    assert str(err.value) == "fps=0 is not a frame rate: use a number in (0, 240], e.g. 8."
    with pytest.raises(MediaError) as err:
        encode_mp4([np.zeros((4, 4, 3), np.float32)])
    assert str(err.value) == (
        "Frames for encoding must be uint8 (H, W, 3) arrays or PIL images, got float32; use "
        "tpu_lab.media.preview(frames, layout='THWC') to convert."
    )
    with pytest.raises(MediaError, match=r"^All frames of a video must have one size"):
        encode_mp4([np.zeros((4, 4, 3), np.uint8), np.zeros((6, 4, 3), np.uint8)])


def test_without_h264_encode_video_falls_back_to_webp_then_gif(monkeypatch):
    frames = _frames(4)
    assert video_mod.encode_video(frames, 8)[1:] == ("mp4", None)
    monkeypatch.setattr(video_mod, "h264_unavailable", lambda: "no libx264 here")
    data, fmt, reason = video_mod.encode_video(frames, 8)
    assert (fmt, reason) == ("webp", "no libx264 here")
    assert Image.open(io.BytesIO(data)).n_frames == 4
    monkeypatch.setattr(video_mod, "webp_available", lambda: False)
    data, fmt, _ = video_mod.encode_video(frames, 8)
    assert fmt == "gif" and Image.open(io.BytesIO(data)).n_frames == 4
    with pytest.raises(MediaError) as err:
        encode_mp4(frames)
    assert str(err.value) == (
        "Cannot encode H.264: no libx264 here. Use encode_webp or encode_gif."
    )


def test_h264_unavailable_without_pyav(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_av(name, *args, **kwargs):
        if name == "av":
            raise ImportError("No module named 'av'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_av)
    assert video_mod.h264_unavailable() == (
        'PyAV is not installed (pip install -e ".[video]")'
    )
