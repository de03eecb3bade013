"""Previews in a real browser: headless Chromium (Debian's, via Playwright) plays the inline H.264
video, and shows the PNG grid and the animated-WebP fallback. The screenshot is kept as
tests/artifacts/media_preview.png."""

from __future__ import annotations

import torch

import tpu_lab  # noqa: F401  (installs the "tpu" device)
from _browser import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, require_browser
from tpu_lab.media import preview
from tpu_lab.media import video as video_mod
from tpu_lab.views import view

require_browser()

from playwright.sync_api import sync_playwright  # noqa: E402 (after the skip: it needs playwright)


def _moving_square(frames=16, size=64):
    x = torch.zeros(frames, 3, size, size)
    for t in range(frames):
        x[t, 0, 8:24, 2 + 2 * t : 18 + 2 * t] = 1.0
        x[t, 2] = t / frames
    return x.to("tpu")


def test_chromium_plays_the_inline_video_and_shows_the_stills(tmp_path, monkeypatch):
    video = preview(_moving_square(), layout="TCHW", fps=8)
    grid = preview(torch.rand(4, 3, 32, 32), labels=["0", "1", "2", "3"])
    with monkeypatch.context() as m:
        m.setattr(video_mod, "h264_unavailable", lambda: "forced for the test")
        fallback = preview(_moving_square(), layout="TCHW", fps=8)
    assert (video.format, fallback.format) == ("mp4", "webp")
    page_file = tmp_path / "preview.html"
    page_file.write_text(
        "<!doctype html><html><body>"
        + "".join(f"<div id='{k}'>{view(p).to_html()}</div>" for k, p in
                  (("video", video), ("grid", grid), ("fallback", fallback)))
        + "</body></html>"
    )
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            page.goto(page_file.as_uri())
            page.wait_for_function(
                "document.querySelector('#video video').readyState >= 2", timeout=15_000
            )
            info = page.evaluate(
                "() => { const v = document.querySelector('#video video');"
                " return {w: v.videoWidth, h: v.videoHeight, d: v.duration, err: v.error}; }"
            )
            assert info["err"] is None
            assert (info["w"], info["h"]) == (64, 64)
            assert abs(info["d"] - 16 / 8) < 0.2
            page.evaluate("document.querySelector('#video video').play()")
            page.wait_for_function(
                "document.querySelector('#video video').currentTime > 0.3", timeout=15_000
            )
            sizes = page.evaluate(
                "() => ['#grid img', '#fallback img'].map(s => {"
                " const i = document.querySelector(s);"
                " return [i.complete, i.naturalWidth, i.naturalHeight]; })"
            )
            assert sizes[0] == [True, *grid.size]
            assert sizes[1] == [True, 64, 64]
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "media_preview.png"), full_page=True)
        finally:
            browser.close()
