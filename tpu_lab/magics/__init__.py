"""The ``%tpu`` line and ``%%tpu`` cell magic: parse the arguments, delegate, show the result.

Each subcommand is declared once, beside its handler (:func:`.table.subcommand`), in the module
of its topic: :mod:`.device` (status, use, mode), :mod:`.events` (events, explain, recompiles),
:mod:`.chips` (memory, sharding, plan, cluster, spmd), :mod:`.cells` (preview, time, profile,
parity), :mod:`.session` (doctor, reset, dashboard). The one table they fill
(:data:`COMMANDS`) drives dispatch, the parsers (IPython's ``MagicArgumentParser``),
``%tpu?`` / ``%tpu --help``, tab completion (:mod:`.parsing`) and the generated reference page.
The work is done by :mod:`tpu_lab.session`, the views and the sharding, cluster, media and
dashboard modules, imported when first used; what they return is shown as its view
(:func:`tpu_lab.views.view`). Bad input and errors of those modules (``TpuLabError``) are shown
as a ``UsageError``: one message with the fix, no traceback.
"""

from __future__ import annotations

# The subcommands are declared, and listed by the help, in the order of these imports.
# isort: off
from . import device, events, chips, cells, session  # noqa: F401
# isort: on
from .parsing import completions
from .shell import TpuMagics
from .table import COMMANDS, Arg, Command, subcommand

__all__ = ["COMMANDS", "Arg", "Command", "TpuMagics", "completions", "register", "subcommand"]


def _completer(shell, event) -> list[str]:
    return completions(event.text_until_cursor, list(shell.user_ns))


def register(shell) -> None:
    """Register ``%tpu``/``%%tpu`` and their tab completion with ``shell`` (idempotent)."""
    if "TpuMagics" in shell.magics_manager.registry:
        return
    shell.register_magics(TpuMagics)
    for key in ("%tpu", "%%tpu"):
        shell.set_hook("complete_command", _completer, str_key=key)
    from ..views import lookup

    lookup.register_formatters(shell)  # data objects left as a cell's value show as their views
    from ..events.context import follow

    follow(shell)  # cell numbers for events, and each cell's compilations when it ends
    from . import devices_error

    devices_error.install(shell)  # "Expected all tensors to be on the same device", told
