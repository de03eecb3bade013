"""Gradio demo apps (``tpu-lab demo image|text``): the embedded models on the "tpu" device, with
the compilations, recompilations and cache statistics of every request beside the result.

Needs ``pip install 'tpu-lab[demo]'``.
"""

from __future__ import annotations

#: Where the demos listen unless told otherwise: this machine only.
DEFAULT_HOST = "127.0.0.1"


def require_gradio() -> None:
    """Fail with the extra to install when gradio is missing."""
    try:
        import gradio  # noqa: F401
    except ImportError as exc:
        raise ImportError("The demo apps need gradio: pip install 'tpu-lab[demo]'") from exc


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
