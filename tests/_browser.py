"""What the browser and server tests share: Debian's chromium driven by Playwright (it cannot
download a browser here), with the flags CI allows, a folder for screenshots, free local ports,
a tpu_lab Gradio app served on 127.0.0.1 for the length of a test, and the gradio_client side:
a client, a ``/generate`` call, and the frames of a video it returned."""

from __future__ import annotations

import contextlib
import socket
import time
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = Path(__file__).parent / "artifacts"


def require_browser() -> None:
    """Skip the calling test module when Debian's chromium or Playwright is not installed."""
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is missing (apt-get install chromium)", allow_module_level=True)
    pytest.importorskip("playwright", reason="playwright is missing: pip install 'tpu-lab[dev]'")


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def served(app):
    """``app.launch(...)`` (a ``tpu_lab.apps`` module) on a free port of 127.0.0.1, compiling the
    ATen graph (seconds, where Inductor takes a minute); closed, Dynamo's caches dropped, and
    the lowering restored on the way out."""
    import torch

    from tpu_lab.device.compile_backend import lowering

    torch._dynamo.reset()
    with lowering("aten"):
        blocks = None
        try:
            blocks = app.launch(port=free_port(), block=False)
            yield blocks
        finally:
            if blocks is not None:
                blocks.close()
                blocks.demo.close()
            torch._dynamo.reset()


def client_of(blocks):
    """A gradio_client ``Client`` of an app :func:`served` (result files downloaded)."""
    from gradio_client import Client

    return Client(blocks.local_url, verbose=False, download_files=True)


def generate(client, defaults: dict, **changes):
    """The app's ``/generate`` API called with ``defaults`` (in the app's input order), some of
    them changed."""
    return client.predict(*{**defaults, **changes}.values(), api_name="/generate")


def video_frames(path) -> tuple[int, tuple[int, int], str]:
    """The frame count, frame size and codec of the video at ``path`` (or Gradio's
    ``{"video": path}``)."""
    import av

    path = path if isinstance(path, str) else path["video"]
    with av.open(path) as container:
        stream = container.streams.video[0]
        frames = list(container.decode(stream))
        return len(frames), (frames[0].width, frames[0].height), stream.codec_context.name


#: True once the current notebook's kernel is started, idle and connected (JupyterLab and
#: Notebook 7 both expose their app as ``window.jupyterapp`` with ``expose_app_in_browser``).
_KERNEL_IDLE = """() => {
  const panel = window.jupyterapp && window.jupyterapp.shell.currentWidget;
  const kernel = panel && panel.sessionContext && panel.sessionContext.session
    && panel.sessionContext.session.kernel;
  return kernel && kernel.status === 'idle' && kernel.connectionStatus === 'connected';
}"""


def wait_for_kernel(page, timeout_ms: int = 60_000) -> None:
    """Wait until the notebook open in ``page`` has an idle, connected kernel."""
    page.wait_for_function(_KERNEL_IDLE, timeout=timeout_ms)


def progress():
    """``step(text)``: prints the seconds since this call beside ``text``, so that a failing
    browser test shows how far it got and how long each part took."""
    start = time.monotonic()

    def step(text: str) -> None:
        print(f"{time.monotonic() - start:6.1f} s  {text}", flush=True)

    return step
