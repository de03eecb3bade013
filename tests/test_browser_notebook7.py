"""The dashboard in a real Jupyter Notebook 7, driven by headless Chromium (Debian's, via Playwright).

The same notebook as tests/test_browser_lab.py, opened in Notebook 7's single-document page
(``/notebooks/...``) and run through its menu bar (Run > Run All Cells). The chip tiles and the
event feed's recompile with its reason must show, and clicking DEFER_AND_FUSE must switch
``torch.tpu.eager_mode`` in the kernel (asked through a second client of the same kernel). The
screenshot is kept as tests/artifacts/dashboard-notebook7.png.
"""

from __future__ import annotations

import json

import pytest

from _browser import (
    ARTIFACTS,
    CHROMIUM,
    CHROMIUM_ARGS,
    progress,
    require_browser,
    wait_for_kernel,
)

require_browser()
pytest.importorskip(
    "notebook", minversion="7", reason="Notebook 7 is missing: pip install 'tpu-lab[lab]'"
)
pytest.importorskip("anywidget", reason="anywidget is missing: pip install 'tpu-lab[lab]'")

from test_browser_lab import (  # noqa: E402 (after the skips: it needs the same packages)
    CELLS,
    SLICE_CELLS,
    _api,
    _kernel_eval,
    _notebook,
    check_slice_widget,
    jupyter,
)


def _notebook7_race(error: str) -> bool:
    """Notebook 7's own start-up race (jupyter/notebook#7862), not the dashboard's: its shortcuts
    plugin reads ``registry.plugins[id].schema`` of a settings plugin not loaded yet."""
    return "reading 'schema'" in error and "/static/notebook/notebook_core." in error


@pytest.fixture
def notebook7(tmp_path):
    """A Notebook 7 server; yields (base url, token, root, runtime dir); stopped in finally."""
    settings = {"apputils-extension/notification": '{"fetchNews": "false"}'}
    args = ["--JupyterNotebookApp.expose_app_in_browser=True"]
    with jupyter(tmp_path, "notebook", settings, args, "notebook7.log") as server:
        yield server


def test_dashboard_in_notebook7(notebook7):
    from playwright.sync_api import expect, sync_playwright

    base, token, root, runtime = notebook7
    step = progress()

    (root / "dashboard.ipynb").write_text(json.dumps(_notebook(CELLS)))
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1400})
            errors: list[str] = []  # uncaught exceptions in the page (the widget's included)
            page.on("pageerror", lambda error: errors.append(f"{error}\n{error.stack}"))
            step("browser started")
            page.goto(f"{base}/notebooks/dashboard.ipynb?token={token}")
            step("page loaded")
            # Notebook 7's own shell (not JupyterLab's): the notebook is its only document
            expect(page.locator("#jp-NotebookLogo")).to_be_visible(timeout=60_000)
            wait_for_kernel(page)
            step("kernel idle")
            assert page.evaluate("() => window.jupyterapp.name") == "Jupyter Notebook"
            # the menu bar, as a person would: Run > Run All Cells
            page.locator(".lm-MenuBar").get_by_role("menuitem", name="Run", exact=True).click()
            page.get_by_role("menuitem", name="Run All Cells", exact=True).click()

            dash = page.locator(".tpu-dash")
            expect(dash).to_be_visible(timeout=60_000)
            step("dashboard shown")
            expect(dash.locator(".tpu-dash-chip")).to_have_count(4)
            recompile = dash.locator(".tpu-dash-event.tpu-kind-recompile")
            expect(recompile).to_contain_text(
                "recompiled <lambda>: argument x: dimension 0 changed from 4 to 8", timeout=90_000
            )
            explanation = dash.locator(".tpu-dash-why[open] .tpu-dash-explanation")
            expect(explanation).to_contain_text("size mismatch at index 0. expected 4, actual 8")
            expect(explanation).to_contain_text("how to fix")
            expect(dash.locator(".tpu-dash-group-head").first).to_contain_text("1 recompile")
            expect(dash.locator(".tpu-dash-chip").first).to_contain_text("2.00 GiB of 32.00 GiB")
            step("chips and the recompile explained in the feed")

            kernel_id = _api(base, token, "/api/sessions")[0]["kernel"]["id"]
            mode = "print(torch.tpu.eager_mode.name)"
            assert _kernel_eval(runtime, kernel_id, mode).strip() == "DEFER_NEVER"
            compiled = dash.locator("button[data-mode='DEFER_AND_FUSE']")
            expect(compiled).to_have_attribute("aria-checked", "false")
            compiled.click()
            expect(dash.locator(".tpu-dash-event.tpu-kind-mode_change")).to_contain_text(
                "eager mode DEFER_NEVER -> DEFER_AND_FUSE", timeout=30_000
            )
            expect(compiled).to_have_attribute("aria-checked", "true")
            assert _kernel_eval(runtime, kernel_id, mode).strip() == "DEFER_AND_FUSE"
            step("toggle switched the kernel's eager mode")
            assert [error for error in errors if not _notebook7_race(error)] == []

            ARTIFACTS.mkdir(exist_ok=True)
            dash.scroll_into_view_if_needed()
            page.screenshot(path=str(ARTIFACTS / "dashboard-notebook7.png"))
        except Exception:
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "dashboard-notebook7-failure.png"))
            raise
        finally:
            browser.close()


def test_slice_widget_in_notebook7(notebook7):
    from playwright.sync_api import expect, sync_playwright

    base, token, root, runtime = notebook7
    step = progress()

    (root / "slice.ipynb").write_text(json.dumps(_notebook(SLICE_CELLS)))
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1200})
            errors: list[str] = []  # uncaught exceptions in the page (the widget's included)
            page.on("pageerror", lambda error: errors.append(f"{error}\n{error.stack}"))
            page.goto(f"{base}/notebooks/slice.ipynb?token={token}")
            expect(page.locator("#jp-NotebookLogo")).to_be_visible(timeout=60_000)
            wait_for_kernel(page)
            step("kernel idle")
            assert page.evaluate("() => window.jupyterapp.name") == "Jupyter Notebook"
            page.locator(".lm-MenuBar").get_by_role("menuitem", name="Run", exact=True).click()
            page.get_by_role("menuitem", name="Run All Cells", exact=True).click()
            check_slice_widget(page, base, token, runtime, step, "slice_widget_nb7")
            assert [error for error in errors if not _notebook7_race(error)] == []
            page.screenshot(path=str(ARTIFACTS / "slice_widget_nb7-page.png"))
        except Exception:
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "slice_widget_nb7-failure.png"))
            raise
        finally:
            browser.close()
