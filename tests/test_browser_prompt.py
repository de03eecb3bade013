"""``tpu-lab demo image`` (text to image) in headless Chromium: type a prompt, choose compiled
mode, click Generate, see the image, the judge's verdict, a trajectory video the browser can play
and the transformer's compilation. The screenshot is kept as tests/artifacts/gradio_prompt.png.
"""

from __future__ import annotations

import re

import pytest

import tpu_lab  # noqa: F401  (the "tpu" device)
from _browser import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, require_browser, served

require_browser()
pytest.importorskip("gradio", reason="gradio is missing: pip install 'tpu-lab[demo]'")

from playwright.sync_api import sync_playwright  # noqa: E402

from tpu_lab.apps import prompt as app  # noqa: E402
from tpu_lab.models import shapes  # noqa: E402

PROMPT = "a small yellow square in the bottom right on a gray background"


@pytest.fixture
def server():
    with served(app) as blocks:
        yield blocks


def test_a_prompt_gives_an_image_a_verdict_and_a_playable_video(server):
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1200})
            page.goto(server.local_url, wait_until="networkidle")
            page.fill("#prompt textarea", PROMPT)
            page.get_by_label("compiled").check()
            page.click("#generate")
            page.wait_for_selector("#prompt-image img", timeout=120_000)
            page.wait_for_function(
                "() => { const v = document.querySelector('#trajectory video');"
                " return v && v.readyState >= 2 && v.duration > 0; }",
                timeout=60_000,
            )
            video = page.evaluate(
                "() => { const v = document.querySelector('#trajectory video');"
                " return {ready: v.readyState, duration: v.duration, error: v.error && v.error.code}; }"
            )
            image = page.evaluate(
                "() => { const i = document.querySelector('#prompt-image img');"
                " return {complete: i.complete, width: i.naturalWidth, height: i.naturalHeight}; }"
            )
            verdict = page.inner_text("#verdict")
            events = page.inner_text("#events")
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "gradio_prompt.png"), full_page=True)
        finally:
            browser.close()
    assert video["error"] is None and video["ready"] >= 2
    assert video["duration"] == pytest.approx(shapes.STEPS / app.FPS, abs=0.2)
    assert image == {"complete": True, "width": 32 * 8, "height": 32 * 8}  # display scale 8
    assert verdict.startswith("The judge")
    assert re.search(r"compile\s+compiled \w+ in [\d.]+ s \(\d+ ops\)", events), events
