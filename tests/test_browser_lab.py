"""The dashboard in a real JupyterLab, driven by headless Chromium (Debian's, via Playwright).

JupyterLab runs on 127.0.0.1 (a free port, a token, a temporary root); a notebook loads the
extension, opens the dashboard and runs a cell that recompiles. The event feed must show the
recompile with its reason and explanation, and clicking DEFER_AND_FUSE must switch
``torch.tpu.eager_mode`` in the kernel (asked through a second client of the same kernel). The
screenshot is kept as tests/artifacts/dashboard.png.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from _browser import (
    ARTIFACTS,
    CHROMIUM,
    CHROMIUM_ARGS,
    free_port,
    progress,
    require_browser,
    wait_for_kernel,
)

require_browser()
pytest.importorskip("jupyterlab", reason="jupyterlab is missing: pip install 'tpu-lab[lab]'")
pytest.importorskip("anywidget", reason="anywidget is missing: pip install 'tpu-lab[lab]'")

CELLS = [
    "%load_ext tpu_lab",
    "%tpu dashboard",
    "import torch\n"
    "weights = torch.empty(512, 1024, 1024, device='tpu')  # 2 GiB of HBM on chip 0\n"
    "f = torch.compile(lambda x: x * 2 + 1, backend='tpu')\n"
    "f(torch.ones(4, device='tpu'))\n"
    "f(torch.ones(8, device='tpu'))  # recompiles: the shape changed",
]


def _notebook(cells: list[str]) -> dict:
    return {
        "cells": [
            {
                "cell_type": "code",
                "execution_count": None,
                "id": f"c{i}",
                "metadata": {},
                "outputs": [],
                "source": source,
            }  # fmt: skip
            for i, source in enumerate(cells)
        ],
        "metadata": {
            "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }



def _api(base: str, token: str, path: str, method: str = "GET"):
    request = urllib.request.Request(
        f"{base}{path}", method=method, headers={"Authorization": f"token {token}"}
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        body = response.read()
    return json.loads(body) if body else None


@contextlib.contextmanager
def jupyter(tmp_path: Path, app: str, settings: dict[str, str], args: list[str], log_name: str):
    """``python -m <app>`` (jupyterlab or notebook) on 127.0.0.1 with a free port, a token, and
    its own root, runtime, config and settings folders under ``tmp_path``; ``settings`` maps
    "extension/name" to a JupyterLab settings file's text. Yields (base url, token, root,
    runtime dir); in finally its kernels are deleted, the server is stopped and its log kept as
    tests/artifacts/<log_name>."""
    root, runtime = tmp_path / "root", tmp_path / "runtime"
    root.mkdir()
    for where, value in settings.items():
        path = tmp_path / "settings" / "@jupyterlab" / f"{where}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(value)
    port, token = free_port(), secrets.token_hex(16)
    env = {
        **os.environ,
        "JUPYTER_RUNTIME_DIR": str(runtime),
        "JUPYTER_CONFIG_DIR": str(tmp_path / "config"),
        "JUPYTERLAB_SETTINGS_DIR": str(tmp_path / "settings"),
        "JUPYTERLAB_WORKSPACES_DIR": str(tmp_path / "workspaces"),
        "IPYTHONDIR": str(tmp_path / "ipython"),
        "JUPYTER_DATA_DIR": str(tmp_path / "data"),
        "TPU_LAB_TOPOLOGY": "v6e-4",
    }
    log_path = tmp_path / log_name
    log = open(log_path, "w")  # noqa: SIM115 (closed in finally)
    server = subprocess.Popen(
        [sys.executable, "-m", app, "--no-browser", "--ip=127.0.0.1",
         f"--port={port}", "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
         f"--ServerApp.root_dir={root}", *args,
         *(["--allow-root"] if os.geteuid() == 0 else [])],
        env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                _api(base, token, "/api/status")
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{app} did not start:\n" + log_path.read_text()) from None
                time.sleep(0.25)
        yield base, token, root, runtime
    finally:
        with contextlib.suppress(OSError, ValueError):
            for kernel in _api(base, token, "/api/kernels"):
                _api(base, token, f"/api/kernels/{kernel['id']}", method="DELETE")
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=10)
        log.close()
        ARTIFACTS.mkdir(exist_ok=True)
        shutil.copy(log_path, ARTIFACTS / log_name)


@pytest.fixture
def lab(tmp_path):
    """A JupyterLab server; yields (base url, token, root, runtime dir); stopped in finally."""
    settings = {
        "apputils-extension/notification": '{"fetchNews": "false"}',  # no news toast
        "notebook-extension/tracker": '{"autoStartDefaultKernel": true}',  # no kernel dialog
    }
    args = [
        "--LabApp.expose_app_in_browser=True",
        "--LabApp.news_url=None",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        "--LabApp.extension_manager=readonly",
    ]
    with jupyter(tmp_path, "jupyterlab", settings, args, "jupyterlab.log") as server:
        yield server


def _kernel_eval(runtime: Path, kernel_id: str, code: str) -> str:
    """Run ``code`` in the notebook's kernel through a second client; returns its stdout."""
    from jupyter_client import BlockingKernelClient

    client = BlockingKernelClient(connection_file=str(runtime / f"kernel-{kernel_id}.json"))
    client.load_connection_file()
    client.start_channels()
    try:
        out = []
        reply = client.execute_interactive(
            code, timeout=60, output_hook=lambda m: out.append(m["content"].get("text", ""))
        )
        assert reply["content"]["status"] == "ok", reply["content"]
        return "".join(out)
    finally:
        client.stop_channels()


def test_dashboard_in_jupyterlab(lab):
    from playwright.sync_api import expect, sync_playwright

    base, token, root, runtime = lab
    step = progress()

    (root / "dashboard.ipynb").write_text(json.dumps(_notebook(CELLS)))
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1400})
            step("browser started")
            page.goto(f"{base}/lab/tree/dashboard.ipynb?token={token}")
            step("page loaded")
            wait_for_kernel(page)
            step("kernel idle")
            page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")

            dash = page.locator(".tpu-dash")
            expect(dash).to_be_visible(timeout=60_000)
            step("dashboard shown")
            recompile = dash.locator(".tpu-dash-event.tpu-kind-recompile")
            expect(recompile).to_contain_text(
                "recompiled <lambda>: argument x: dimension 0 changed from 4 to 8", timeout=90_000
            )
            explanation = dash.locator(".tpu-dash-why[open] .tpu-dash-explanation")
            expect(explanation).to_contain_text("size mismatch at index 0. expected 4, actual 8")
            expect(explanation).to_contain_text("how to fix")
            expect(dash.locator(".tpu-dash-group-head").first).to_contain_text("1 recompile")
            expect(dash.locator(".tpu-dash-chip")).to_have_count(4)
            expect(dash.locator(".tpu-dash-chip").first).to_contain_text("2.00 GiB of 32.00 GiB")

            step("recompile explained in the feed")
            kernel_id = _api(base, token, "/api/sessions")[0]["kernel"]["id"]
            mode = "print(torch.tpu.eager_mode.name)"
            assert _kernel_eval(runtime, kernel_id, mode).strip() == "DEFER_NEVER"
            dash.locator("button[data-mode='DEFER_AND_FUSE']").click()
            expect(dash.locator(".tpu-dash-event.tpu-kind-mode_change")).to_contain_text(
                "eager mode DEFER_NEVER -> DEFER_AND_FUSE", timeout=30_000
            )
            assert _kernel_eval(runtime, kernel_id, mode).strip() == "DEFER_AND_FUSE"

            step("toggle switched the kernel's eager mode")
            # code run from elsewhere updates the open dashboard: fused graphs hit the cache
            stats = "s = torch.tpu._get_cache_stats(); print(s.num_cache_reqs, s.num_cache_hits)"
            _, hits_before = map(int, _kernel_eval(runtime, kernel_id, stats).split())
            _kernel_eval(
                runtime,
                kernel_id,
                "x = torch.ones(64, device='tpu')\n"
                "for _ in range(8):\n    (x * 2 + 1).sum().item()",
            )
            requests, hits = map(int, _kernel_eval(runtime, kernel_id, stats).split())
            assert hits - hits_before >= 6  # one graph per .item(): compiled, then cache hits
            shown = f"{math.floor(100 * hits / requests + 0.5)}%"  # as the widget rounds it
            expect(dash.locator(".tpu-dash-big")).to_have_text(shown, timeout=30_000)
            expect(dash.locator("button[data-mode='DEFER_AND_FUSE']")).to_have_attribute(
                "aria-checked", "true"
            )
            step("cache hit rate updated")
            ARTIFACTS.mkdir(exist_ok=True)
            dash.scroll_into_view_if_needed()
            dash.screenshot(path=str(ARTIFACTS / "dashboard.png"))
            page.screenshot(path=str(ARTIFACTS / "dashboard-lab.png"))

            # the dark theme: the dashboard follows JupyterLab's colours
            page.evaluate(
                "() => window.jupyterapp.commands.execute("
                "'apputils:change-theme', {theme: 'JupyterLab Dark'})"
            )
            page.wait_for_function("() => document.body.dataset.jpThemeLight === 'false'")
            page.wait_for_timeout(500)  # the theme's stylesheet applies
            dash.screenshot(path=str(ARTIFACTS / "dashboard-dark.png"))

            # the saved notebook keeps a static HTML rendering next to the widget view
            page.evaluate("() => window.jupyterapp.commands.execute('docmanager:save')")
            saved = json.loads((root / "dashboard.ipynb").read_text())
            (output,) = saved["cells"][1]["outputs"]
            assert "application/vnd.jupyter.widget-view+json" in output["data"]
            assert "tpu_lab dashboard" in "".join(output["data"]["text/html"])
        except Exception:
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "dashboard-failure.png"))
            raise
        finally:
            browser.close()


#: The slice widget for Llama-3.1-8B's published config (no weights): training batch 64 x 4096
#: on a v6e-8, which does not fit in HBM without activation checkpointing.
SLICE_CELLS = [
    "from tpu_lab.sharding.published_configs import config\n"
    "from tpu_lab.views import SliceWidget\n"
    "llama = config('llama-3.1-8b')\n"
    "w = SliceWidget(llama, 'train', batch=64, seq=4096, generation='v6e', devices=8)\n"
    "w",
]


def _weighed(runtime: Path, kernel_id: str, **step) -> tuple[str, str]:
    """(expected time, HBM usage) as the widget words them, of weigh() called in the kernel."""
    args = ", ".join(f"{k}={v!r}" for k, v in step.items())
    out = _kernel_eval(runtime, kernel_id, (
        "from tpu_lab.sharding.chooser import weigh\n"
        "from tpu_lab.views.estimate import seconds_text\n"
        "from tpu_lab.units import format_bytes\n"
        f"o = weigh(llama, 'train', batch=64, seq=4096, {args}).estimate\n"
        "print(seconds_text(o.expected_seconds))\n"
        "print(f'{format_bytes(int(o.memory.peak_bytes))} of {format_bytes(o.hbm_capacity)}')"
    ))  # fmt: skip
    expected, usage = out.strip().splitlines()
    return expected, usage


def check_slice_widget(page, base: str, token: str, runtime: Path, step, name: str) -> None:
    """Drive the slice widget of SLICE_CELLS (run already) in ``page``: it shows weigh()'s
    figures, a control changed in the browser is weighed again in the kernel, a refused batch
    says why and keeps the last good state; the screenshot is tests/artifacts/<name>.png."""
    from playwright.sync_api import expect

    widget = page.locator(".tpu-slice")
    expect(widget).to_be_visible(timeout=90_000)
    expected = widget.locator("[data-figure='expected'] .tpu-slice-figure-value")
    usage = widget.locator(".tpu-slice-usage")
    step("slice widget shown")
    kernel_id = _api(base, token, "/api/sessions")[0]["kernel"]["id"]

    # batch 64 x 4096 keeps every activation: it does not fit a v6e chip, and says what would
    time, held = _weighed(runtime, kernel_id, generation="v6e", devices=8, remat="none")
    expect(expected).to_have_text(time)
    expect(usage).to_contain_text(held)
    expect(widget.locator(".tpu-slice-overtag")).to_have_text("OVER")
    expect(widget.locator(".tpu-slice-fix")).to_contain_text(
        "To fit, try more recomputation (remat 'dots' or 'full')")
    ARTIFACTS.mkdir(exist_ok=True)
    widget.screenshot(path=str(ARTIFACTS / f"{name}-over.png"))

    # checkpoint each block (remat full): it fits, and takes longer
    widget.locator("select[data-control='remat']").select_option("full")
    time, held = _weighed(runtime, kernel_id, generation="v6e", devices=8, remat="full")
    expect(expected).to_have_text(time, timeout=30_000)
    expect(usage).to_contain_text(held)
    expect(widget.locator(".tpu-slice-overtag")).to_have_count(0)
    expect(widget.locator(".tpu-slice-verdict")).to_contain_text("fits in HBM")
    assert _kernel_eval(runtime, kernel_id, "print(w.remat, w.option.remat)").split() == [
        "full", "full"]
    step("remat full weighed in the kernel")

    # twice the chips: a pod slice of 4 hosts
    widget.locator("select[data-control='devices']").select_option("16")
    time, held = _weighed(runtime, kernel_id, generation="v6e", devices=16, remat="full")
    expect(expected).to_have_text(time, timeout=30_000)
    expect(widget.locator(".tpu-slice-choice")).to_have_text(
        "v6e-16 (16 chips) · tp 1 x fsdp 16 · remat full")
    step("v6e-16 weighed")

    # a batch the 16 FSDP chips cannot split: refused, with the fix; the last good state stays
    batch = widget.locator("input[data-control='batch']")
    batch.fill("40")
    batch.press("Tab")
    expect(widget.locator(".tpu-slice-error")).to_contain_text(
        "batch must be a positive multiple of the 16 FSDP chips beside tensor parallelism of "
        "1; got 40, try 32.", timeout=30_000)
    expect(batch).to_have_value("64")
    expect(expected).to_have_text(time)
    step("refused batch explained")

    # the price of a generation without a published one
    widget.locator("select[data-control='generation']").select_option("v7")
    expect(widget.locator("[data-figure='step_price'] .tpu-slice-figure-value")).to_have_text(
        "no price", timeout=30_000)
    expect(widget.locator(".tpu-slice-error")).to_be_hidden()
    widget.locator("select[data-control='generation']").select_option("v6e")
    expect(expected).to_have_text(time, timeout=30_000)
    step("v7 unpriced, back on v6e")

    ARTIFACTS.mkdir(exist_ok=True)
    widget.scroll_into_view_if_needed()
    widget.screenshot(path=str(ARTIFACTS / f"{name}.png"))


def test_slice_widget_in_jupyterlab(lab):
    from playwright.sync_api import sync_playwright

    base, token, root, runtime = lab
    step = progress()

    (root / "slice.ipynb").write_text(json.dumps(_notebook(SLICE_CELLS)))
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1200})
            errors: list[str] = []  # uncaught exceptions in the page (the widget's included)
            page.on("pageerror", lambda error: errors.append(f"{error}\n{error.stack}"))
            page.goto(f"{base}/lab/tree/slice.ipynb?token={token}")
            wait_for_kernel(page)
            step("kernel idle")
            page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
            check_slice_widget(page, base, token, runtime, step, "slice_widget_lab")
            assert errors == []

            # the dark theme: the widget follows JupyterLab's colours
            page.evaluate(
                "() => window.jupyterapp.commands.execute("
                "'apputils:change-theme', {theme: 'JupyterLab Dark'})"
            )
            page.wait_for_function("() => document.body.dataset.jpThemeLight === 'false'")
            page.wait_for_timeout(500)  # the theme's stylesheet applies
            page.locator(".tpu-slice").screenshot(path=str(ARTIFACTS / "slice_widget_dark.png"))

            # the saved notebook keeps the static HTML beside the widget view
            page.evaluate("() => window.jupyterapp.commands.execute('docmanager:save')")
            saved = json.loads((root / "slice.ipynb").read_text())
            (output,) = saved["cells"][0]["outputs"]
            assert "application/vnd.jupyter.widget-view+json" in output["data"]
            assert "a snapshot: the live widget needs a running kernel" in "".join(
                output["data"]["text/html"])
        except Exception:
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "slice_widget_lab-failure.png"))
            raise
        finally:
            browser.close()
