"""Notebooks 02 and 03 as a workshop participant runs them: opened in a real JupyterLab (headless
Chromium, Debian's, via Playwright), every cell run with "Run All", the notebook saved and its
outputs checked as ``scripts/notebooks.py`` checks them (no error, traceback, stderr or machine
path). Screenshots of the cells the workshop talks about are kept as
tests/artifacts/workshop-02.png and workshop-03.png."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from _browser import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, require_browser, wait_for_kernel

require_browser()
pytest.importorskip("jupyterlab", reason="jupyterlab is missing: pip install 'tpu-lab[lab]'")

from test_browser_lab import jupyter  # noqa: E402 (after the skips: it needs jupyterlab)
from test_notebooks import runner  # noqa: E402 (scripts/notebooks.py, loaded once)

#: notebook -> (the text of the cell to photograph, what its output must show)
SHOWN = {
    "02_eager_vs_compiled": ("with tpu_lab.cache_counts() as cache:", "cache"),
    # dollar amounts stay text: MathJax would typeset "$0.0007 per step ... at $1.20" as a formula
    "03_sharding_across_chips": ("plan = sh.plan(llama7b", "list price (not a quote) $0."),
}


@pytest.fixture
def lab(tmp_path):
    """JupyterLab on 127.0.0.1 that renders every cell (no windowing), stopped in finally."""
    settings = {
        "apputils-extension/notification": '{"fetchNews": "false"}',
        "notebook-extension/tracker": '{"autoStartDefaultKernel": true, "windowingMode": "none"}',
    }
    args = ["--LabApp.news_url=None", "--LabApp.expose_app_in_browser=True",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
            "--LabApp.extension_manager=readonly"]
    with jupyter(tmp_path, "jupyterlab", settings, args, "workshop-lab.log") as server:
        yield server


def _cleared(path: Path) -> dict:
    """The notebook as a participant opens it after `git checkout`, its outputs removed."""
    nb = json.loads(path.read_text())
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            cell["outputs"], cell["execution_count"] = [], None
    return nb


@pytest.mark.parametrize("name", list(SHOWN))
def test_a_workshop_notebook_runs_clean_in_jupyterlab(lab, name):
    import nbformat
    from playwright.sync_api import expect, sync_playwright

    base, token, root, _ = lab
    nb = _cleared(runner.NOTEBOOKS / f"{name}.ipynb")
    (root / f"{name}.ipynb").write_text(json.dumps(nb))
    source, shown = SHOWN[name]
    index = next(i for i, c in enumerate(nb["cells"]) if source in "".join(c["source"]))
    code_cells = sum(c["cell_type"] == "code" for c in nb["cells"])
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        try:
            page.goto(f"{base}/lab/tree/{name}.ipynb?token={token}")
            wait_for_kernel(page)
            page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
            deadline = time.monotonic() + 300
            prompts = page.locator(".jp-CodeCell .jp-InputPrompt")
            while time.monotonic() < deadline:  # every prompt numbered: every cell has run
                texts = prompts.all_inner_texts()
                if len(texts) == code_cells and all(t.strip("[]: ").isdigit() for t in texts):
                    break
                page.wait_for_timeout(500)
            else:
                raise AssertionError(f"{name} did not finish in 300 s: prompts {texts}")
            cell = page.locator(".jp-Notebook .jp-Cell").nth(index)
            expect(cell.locator(".jp-OutputArea")).to_contain_text(shown)
            ARTIFACTS.mkdir(exist_ok=True)
            cell.scroll_into_view_if_needed()
            cell.screenshot(path=str(ARTIFACTS / f"workshop-{name[:2]}.png"))
            page.evaluate("() => window.jupyterapp.commands.execute('docmanager:save')")
            page.wait_for_timeout(1000)  # the save reaches the server
        except Exception:
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / f"workshop-{name[:2]}-failure.png"))
            raise
        finally:
            browser.close()
    saved = nbformat.read(root / f"{name}.ipynb", as_version=4)
    assert runner.problems(saved) == []
