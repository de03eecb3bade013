"""The documentation site as a reader sees it: headless Chromium (Debian's, via Playwright)
opens the home page, a guide, a rendered notebook and the API reference from the built folder
(``file://``, no server) with every network request refused. Each page must have its title,
the navigation and no missing image, and must ask the network for nothing. The screenshots are
kept as tests/artifacts/docs-*.png: look at them after changing the site."""

from __future__ import annotations

import pytest

from _browser import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, require_browser
from _docs import output

require_browser()
pytest.importorskip("sphinx", reason="sphinx is missing: pip install 'tpu-lab[docs]'")

#: page -> (screenshot name, the start of its title)
PAGES = {
    "index.html": ("home", "tpu_lab"),
    "guides/eager-and-compiled.html": ("guide", "Eager vs compiled, and recompiles"),
    "notebooks/02_eager_vs_compiled.html": ("notebook", "02 · Eager vs compiled"),
    "api/tpu_lab.html": ("api", "tpu_lab"),
}
#: Entries the navigation of every page shows, one per part of the site.
NAV = ["Getting started", "Devices and HBM", "The teaching notebooks", "00 · Tour",
       "Model card: digits", "The %tpu magics", "API reference", "Architecture"]  # fmt: skip
_BROKEN_IMAGES = "() => [...document.images].filter(i => !i.complete || !i.naturalWidth).map(i => i.src)"


def test_pages_render_from_the_folder_without_network(docs_site):
    from playwright.sync_api import sync_playwright

    built, site = docs_site
    assert built.returncode == 0, output(built)
    refused = []

    def route(r):
        if r.request.url.startswith("file:"):
            r.continue_()
        else:
            refused.append(r.request.url)
            r.abort()

    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            context = browser.new_context(viewport={"width": 1280, "height": 900})
            context.route("**/*", route)
            page = context.new_page()
            errors = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            for path, (name, title) in PAGES.items():
                page.goto((site / path).as_uri(), wait_until="load")
                for image in page.locator("img").all():  # load the lazy ones too
                    image.scroll_into_view_if_needed()
                page.evaluate("() => window.scrollTo(0, 0)")
                page.wait_for_function("() => [...document.images].every(i => i.complete)")
                assert page.title().startswith(title) and page.title().endswith("tpu_lab"), path
                nav = page.locator("nav.bd-docs-nav").inner_text()
                assert [entry for entry in NAV if entry not in nav] == [], path
                assert page.evaluate(_BROKEN_IMAGES) == [], path
                heading = page.locator("article.bd-article h1").first.inner_text()
                assert heading.startswith(title), (path, heading)
                page.screenshot(path=str(ARTIFACTS / f"docs-{name}.png"))
        finally:
            browser.close()
    assert refused == []
    assert errors == []
