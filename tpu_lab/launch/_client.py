"""The ipyparallel client both kinds of cluster use.

ipyparallel's ``Client`` relays an engine's comm messages (an engine that shows a widget, such
as a Hugging Face progress bar) when it runs inside an IPython kernel. It decides by reading
``get_ipython().kernel``, which a plain IPython shell (the terminal, ``InteractiveShell``)
does not have: the relay then raises in the client's receiving thread, and the rest of that
reply, the cell's result included, is lost. :func:`client` returns a client that drops comm
messages where no kernel could relay them, and behaves as ipyparallel's everywhere else.
"""

from __future__ import annotations

import functools


def _shell_without_kernel() -> bool:
    from IPython import get_ipython

    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is None


@functools.cache
def _client_class():
    import ipyparallel as ipp

    class Client(ipp.Client):
        def _dispatch_iopub(self, msg_parts):
            if _shell_without_kernel():
                _, frames = self.session.feed_identities(msg_parts, copy=False)
                header = self.session.unpack(frames[1].bytes)
                if header.get("msg_type", "").startswith("comm_"):
                    return None
            return super()._dispatch_iopub(msg_parts)

    return Client


def client(*args, **kwargs):
    """An ``ipyparallel.Client(*args, **kwargs)`` that keeps replies whole in a shell without
    a kernel (see the module's docstring)."""
    return _client_class()(*args, **kwargs)
