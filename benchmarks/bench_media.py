"""Video encoding for previews: 64 frames of 256×256 to H.264 MP4 (the issue's target: at most
1 s), the whole ``preview`` of a (64, 3, 256, 256) "tpu" tensor, and the WebP/GIF fallbacks.

Frames are a moving colour pattern with fine detail (closer to generated images than flat
colour). Median of repeats, in one run. Run: ``python benchmarks/bench_media.py``.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

import tpu_lab  # noqa: F401
from _record import quick, record
from tpu_lab.media import encode_gif, encode_mp4, encode_webp, preview
from tpu_lab.views import view

FRAMES, SIZE = 64, 256


def frames() -> np.ndarray:
    """(64, 256, 256, 3) uint8: drifting sine waves in three colours plus fixed fine grain."""
    y, x = np.mgrid[0:SIZE, 0:SIZE].astype(np.float32) / SIZE
    grain = np.random.default_rng(0).normal(0, 6, (SIZE, SIZE, 1)).astype(np.float32)
    out = np.empty((FRAMES, SIZE, SIZE, 3), np.uint8)
    for t in range(FRAMES):
        phase = 2 * np.pi * t / FRAMES
        r = np.sin(6 * x + phase) + np.sin(4 * y - phase)
        g = np.sin(5 * (x + y) + 2 * phase)
        b = np.cos(7 * np.hypot(x - 0.5, y - 0.5) * 2 - phase)
        rgb = np.stack([r / 2, g, b], axis=-1) * 100 + 128 + grain
        out[t] = np.clip(rgb, 0, 255).astype(np.uint8)
    return out


def median_seconds(fn, repeats: int) -> float:
    fn()  # warm: codec and library loading
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=3 if quick() else 7)
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    args = parser.parse_args()
    video = list(frames())
    size = len(encode_mp4(video, fps=8))
    record(
        "media",
        f"{FRAMES} frames {SIZE}x{SIZE} to H.264 MP4",
        median_seconds(lambda: encode_mp4(video, fps=8), args.repeats),
        "s",
        target=1.0,
        note=f"{size / 1024:.0f} KB, crf 20, preset veryfast",
    )
    tensor = torch.from_numpy(np.stack(video)).permute(0, 3, 1, 2).float().div(255).to("tpu")
    record(
        "media",
        f"preview() of a ({FRAMES}, 3, {SIZE}, {SIZE}) tpu tensor",
        median_seconds(lambda: view(preview(tensor, layout="TCHW")).to_html(), args.repeats),
        "s",
        note="copy to host, value range, frames, H.264, inline HTML",
    )
    for name, encode in (("animated WebP (fallback)", encode_webp), ("GIF (fallback)", encode_gif)):
        size = len(encode(video, fps=8))
        record(
            "media",
            f"{FRAMES} frames {SIZE}x{SIZE} to {name}",
            median_seconds(lambda encode=encode: encode(video, fps=8), max(1, args.repeats // 2)),
            "s",
            note=f"{size / 1024:.0f} KB",
        )


if __name__ == "__main__":
    main()
