"""``tpu-lab demo image`` in headless Chromium (Debian's, via Playwright): choose compiled
mode, click Generate, see the digits, a trajectory video that the browser can play (its
``readyState`` and ``duration``) and the request's events (the UNet's compilation) under its
estimated TPU time. The screenshot is kept as tests/artifacts/gradio.png.
"""

from __future__ import annotations

import pytest

import tpu_lab  # noqa: F401  (the "tpu" device)
from _browser import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, require_browser, served

require_browser()
pytest.importorskip("gradio", reason="gradio is missing: pip install 'tpu-lab[demo]'")

from playwright.sync_api import sync_playwright  # noqa: E402

from tpu_lab.apps import image as app  # noqa: E402

#: The video's frames (one per denoising step at the default 32 steps) at 8 frames a second.
STEPS = 32



@pytest.fixture
def server():
    with served(app) as blocks:
        yield blocks


def test_generate_shows_the_digits_and_a_playable_video(server):
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1100})
            page.goto(server.local_url, wait_until="networkidle")
            page.get_by_label("compiled").check()
            page.click("#generate")
            page.wait_for_selector("#digits-image img", timeout=60_000)
            page.wait_for_selector("#trajectory video", timeout=60_000)
            page.wait_for_function(
                "() => { const v = document.querySelector('#trajectory video');"
                " return v && v.readyState >= 2 && v.duration > 0; }",
                timeout=30_000,
            )
            video = page.evaluate(
                "() => { const v = document.querySelector('#trajectory video');"
                " return {ready: v.readyState, duration: v.duration, width: v.videoWidth,"
                " height: v.videoHeight, error: v.error && v.error.code}; }"
            )
            image = page.evaluate(
                "() => { const i = document.querySelector('#digits-image img');"
                " return {complete: i.complete, width: i.naturalWidth, height: i.naturalHeight}; }"
            )
            events = page.inner_text("#events")
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "gradio.png"), full_page=True)
        finally:
            browser.close()
    assert video["error"] is None and video["ready"] >= 2
    assert video["duration"] == pytest.approx(STEPS / app.FPS, abs=0.2)
    assert video["width"] > 0 and video["height"] > 0
    # 4 digits of 8x8 pixels in a row, 2 pixels apart, shown 16x (the app's defaults)
    assert image == {"complete": True, "width": (4 * 8 + 5 * 2) * 16, "height": (8 + 4) * 16}
    assert "compiled in" in events and "compiled forward in" in events
    assert "TPU time: expected about " in events and " per image (idealised bound " in events
    assert "), estimated on an idealised TPU v6e (not a measurement), on 1 chip, compiled: UNet " \
        in events
