"""The table of ``%tpu`` subcommands: each declared once, beside its handler, by :func:`subcommand`.

``@subcommand("events", "the event log ...", Arg(("--cell",), {...}))`` above a handler puts a
:class:`Command` into :data:`COMMANDS`; that one table drives dispatch (``%tpu events`` calls
the handler), the parsers, ``%tpu --help``, tab completion and the generated reference page
(``docs/reference/magics.md``). A handler is ``handler(magics, args, cell)``: the
:class:`~tpu_lab.magics.shell.TpuMagics` instance (its ``run_cell`` and ``lookup``), the parsed
arguments, and the cell's source (``None`` on a line).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Arg:
    """One argument: ``add_argument(*flags, **options)``; ``complete`` names what tab completion
    offers for its value when it has no ``choices``: ``"topology"`` or ``"variable"``."""

    flags: tuple[str, ...]
    options: dict = field(default_factory=dict, hash=False)
    complete: str | None = None


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    args: tuple[Arg, ...] = ()
    line: bool = True
    cell: bool = False
    handler: Callable | None = field(default=None, compare=False, repr=False)


#: Every subcommand, in the order the help lists them (the order they are declared in).
COMMANDS: dict[str, Command] = {}


def subcommand(name: str, help: str, *args: Arg, line: bool = True, cell: bool = False):
    """Declare ``%tpu NAME`` (``%%tpu NAME`` where ``cell``) with the handler it decorates."""

    def declare(handler: Callable) -> Callable:
        if name in COMMANDS:
            raise ValueError(f"%tpu {name} is declared twice")
        COMMANDS[name] = Command(name, help, args, line, cell, handler)
        return handler

    return declare


def cell_commands() -> tuple[str, ...]:
    """``('%%tpu mode MODE', '%%tpu time', ...)``: how each cell subcommand starts a cell."""
    out = []
    for c in COMMANDS.values():
        if c.cell:
            takes = next((a.options.get("metavar") or a.flags[0].upper() for a in c.args
                          if not a.flags[0].startswith("-")), None)
            out.append(f"%%tpu {c.name}" + (f" {takes}" if takes and c.line else ""))
    return tuple(out)
