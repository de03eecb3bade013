"""``tpu-lab demo video`` (text to video) in headless Chromium: type a prompt, click Generate, see
the clip play in the browser (16 frames at 8 per second) and the judge's verdict. The screenshot
is kept as tests/artifacts/gradio_video.png."""

from __future__ import annotations

import pytest

import tpu_lab  # noqa: F401  (the "tpu" device)
from _browser import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, require_browser, served

require_browser()
pytest.importorskip("gradio", reason="gradio is missing: pip install 'tpu-lab[demo]'")

from playwright.sync_api import sync_playwright  # noqa: E402

from tpu_lab.apps import video as app  # noqa: E402
from tpu_lab.models import clips  # noqa: E402

PROMPT = "a small yellow square moving up on a gray background"


@pytest.fixture
def server():
    with served(app) as blocks:
        yield blocks


def test_a_prompt_gives_a_playing_clip_and_a_verdict(server):
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1100})
            page.goto(server.local_url, wait_until="networkidle")
            page.fill("#prompt textarea", PROMPT)
            page.click("#generate")
            page.wait_for_function(
                "() => { const v = document.querySelector('#clip video');"
                " return v && v.readyState >= 2 && v.duration > 0 && v.currentTime > 0; }",
                timeout=120_000,
            )
            clip = page.evaluate(
                "() => { const v = document.querySelector('#clip video');"
                " return {duration: v.duration, width: v.videoWidth, paused: v.paused,"
                " error: v.error && v.error.code}; }"
            )
            page.wait_for_function(
                "() => document.querySelector('#verdict').innerText.startsWith('The judge')"
            )
            verdict = page.inner_text("#verdict")
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "gradio_video.png"), full_page=True)
        finally:
            browser.close()
    assert clip["error"] is None and not clip["paused"]  # autoplay, looping
    assert clip["duration"] == pytest.approx(clips.FRAMES / app.CLIP_FPS, abs=0.2)
    assert clip["width"] == 32 * 8  # display scale 8
    assert verdict.startswith("The judge")
