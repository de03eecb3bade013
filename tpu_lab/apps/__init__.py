"""Gradio demo apps (``tpu-lab demo image|video|digits|text``): the embedded models on the "tpu"
device, with the compilations, recompilations and cache statistics of every request beside the
result.

Needs ``pip install 'tpu-lab[demo]'``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from .. import _install

#: Where the demos listen unless told otherwise: this machine only.
DEFAULT_HOST = "127.0.0.1"


def require_gradio() -> None:
    """Fail with the extra to install when gradio is missing."""
    try:
        import gradio  # noqa: F401
    except ImportError as exc:
        raise ImportError(f"The demo apps need gradio: {_install.hint('demo')}") from exc


def serve(blocks, *, host: str, port: int | None, share: bool, block: bool):
    """Serve a demo's Blocks on ``host:port`` (a public share link only with ``share=True``);
    returns the Blocks (``.close()`` stops it)."""
    blocks.launch(
        server_name=host,
        server_port=port,
        share=share,
        prevent_thread_lock=not block,
        show_error=True,
    )
    return blocks


def entry_points(make_demo: Callable[[Any, str], Any], default: str):
    """A demo module's ``build(model, device)`` and ``launch(model, ...)``, from ``make_demo``
    (model path or None, device -> the demo object, whose ``blocks()`` makes the Gradio Blocks).
    ``default`` names the model used when ``model`` is None."""

    def build(model: str | Path | None = None, device: str = "tpu"):
        require_gradio()
        demo = make_demo(model, device)
        blocks = demo.blocks()
        blocks.demo = demo
        return blocks

    def launch(
        model: str | Path | None = None,
        *,
        device: str = "tpu",
        host: str = DEFAULT_HOST,
        port: int | None = None,
        share: bool = False,
        block: bool = True,
    ):
        return serve(build(model, device), host=host, port=port, share=share, block=block)

    build.__doc__ = (
        f"The app for ``model`` (default: {default}) as Gradio Blocks; the demo object is "
        "``blocks.demo``."
    )
    launch.__doc__ = (
        "Build and serve the app on ``host:port`` (127.0.0.1 and a free port by default; a "
        "public share link only with ``share=True``); returns the Blocks (``.close()`` stops it)."
    )
    return build, launch
