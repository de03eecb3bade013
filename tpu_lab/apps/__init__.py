"""Gradio demo apps (``tpu-lab demo image``): the embedded models on the "tpu" device, with
the compilations, recompilations and cache statistics of every request beside the result.

Needs ``pip install 'tpu-lab[demo]'``.
"""

from __future__ import annotations

#: Where the demos listen unless told otherwise: this machine only.
DEFAULT_HOST = "127.0.0.1"
