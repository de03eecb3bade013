"""Reading a ``%tpu`` line: the parsers, the usage and help texts, the errors with their fix,
and tab completion, all built from the one table (:data:`tpu_lab.magics.table.COMMANDS`).

The parsers are IPython's ``MagicArgumentParser``; what some words already give (for tab
completion and for values that start with "-") is asked of argparse itself (:class:`_Given`),
so that both read a line by the same rules.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import functools
import importlib
import re
import textwrap
from collections.abc import Iterable

from IPython.core.error import UsageError
from IPython.core.magic_arguments import MagicArgumentParser

from ..errors import TpuLabError
from ..session import FUSE, MODES
from .table import COMMANDS, Arg, Command, cell_commands


def image_size(text: str) -> tuple[int, int]:
    """``'1024x768'`` -> (1024, 768); ``'512'`` -> (512, 512)."""
    parts = text.lower().split("x")
    if len(parts) in (1, 2) and all(p.isdigit() and int(p) > 0 for p in parts):
        return (int(parts[0]), int(parts[-1]))
    raise argparse.ArgumentTypeError(
        f"{text!r} is not an image size: give HEIGHTxWIDTH in pixels, e.g. 1024x1024 (or 1024)"
    )


class _Given(argparse.ArgumentParser):
    """A subcommand's arguments without types, choices, defaults or required ones: argparse
    then says which arguments some words give (by its own rules: abbreviations,
    ``--option=value``, switches) and never stops at a value; what tab completion and
    :func:`glue_numbers` ask."""

    def __init__(self, command: Command) -> None:
        super().__init__(add_help=False, argument_default=argparse.SUPPRESS)
        #: Each argument and the attribute argparse stores it under.
        self.dests: list[tuple[Arg, str]] = []
        for arg in command.args:
            options = {k: v for k, v in arg.options.items() if k in ("action", "dest")}
            if not arg.flags[0].startswith("-"):
                options["nargs"] = "?"
            self.dests.append((arg, self.add_argument(*arg.flags, **options).dest))

    def error(self, message: str):  # argparse's documented hook: raise instead of exiting
        raise ValueError(message)


@functools.cache
def _given_parser(name: str) -> _Given:
    return _Given(COMMANDS[name])


_CURSOR = "\x00next"  # stands for the word after the given ones


def _given(name: str, words: list[str]) -> tuple[dict, Arg | None]:
    """What ``words`` give subcommand ``name`` (attribute -> value, as argparse reads them), and
    the argument the next word would be (None: no argument takes it); ValueError when argparse
    refuses the words."""
    parser = _given_parser(name)
    given = vars(parser.parse_known_args([*words, _CURSOR])[0])
    return given, next((arg for arg, dest in parser.dests if given.get(dest) == _CURSOR), None)


_NUMBER = re.compile(r"-\.?\d")  # "-1,1", "-0.5": a value, though it starts with "-"


def glue_numbers(name: str, tokens: list[str]) -> list[str]:
    """``--range -1,1`` as ``--range=-1,1``: argparse reads a word that starts with "-" as an
    option unless it is a plain negative number, so such a word is joined to the option before
    it where that option takes a value, in argparse's own ``--option=value`` form."""
    glued: list[str] = []
    for token in tokens:
        if glued and _NUMBER.match(token) and _option_wants_value(name, glued):
            glued[-1] = f"{glued[-1]}={token}"
        else:
            glued.append(token)
    return glued


def _option_wants_value(name: str, words: list[str]) -> bool:
    try:
        at = _given(name, words)[1]
    except ValueError:  # argparse refuses the words: it will say why
        return False
    return at is not None and at.flags[0].startswith("-")


def usage(command: Command) -> str:
    """``%tpu events [--cell N] [--kind compile|recompile|...] [--last N]``."""
    positional, optional = [], []
    for arg in command.args:
        o = arg.options
        flag = arg.flags[0]
        choices = "|".join(o["choices"]) if "choices" in o else None
        value = o.get("metavar") or choices or flag.lstrip("-").upper()
        if flag.startswith("-"):
            optional.append(f"[{flag}]" if o.get("action") == "store_true" else f"[{flag} {value}]")
        else:
            positional.append(f"[{value}]" if o.get("nargs") == "?" else value)
    return " ".join([_prog(command), *positional, *optional])


def _prog(command: Command) -> str:
    return f"{'%tpu' if command.line else '%%tpu'} {command.name}"


@functools.cache
def parser(name: str) -> MagicArgumentParser:
    """The parser of subcommand ``name``."""
    command = COMMANDS[name]
    built = MagicArgumentParser(
        prog=_prog(command),
        usage="%(prog)s" + usage(command).removeprefix(_prog(command)),
        description=command.help,
        formatter_class=argparse.HelpFormatter,
    )
    for arg in command.args:
        built.add_argument(*arg.flags, **arg.options)
    return built


def overview() -> str:
    """``%tpu --help``: every subcommand, its usage and what it does."""
    lines = [
        "tpu_lab: the TPU device, its compilations and its memory, from a notebook.",
        "",
        "%tpu SUBCOMMAND [options]   (plain %tpu: status)",
        "%%tpu SUBCOMMAND            (a cell: " + ", ".join(cell_commands()) + ")",
        "%tpu SUBCOMMAND --help      (a subcommand's options)",
        "",
    ]
    for command in COMMANDS.values():
        lines.append(f"  {usage(command)}")
        lines += textwrap.wrap(command.help, 96, initial_indent=" " * 6, subsequent_indent=" " * 6)
    return "\n".join(lines)


def unknown(name: str) -> str:
    """What to say of ``%tpu NAME`` when NAME is no subcommand (a mode's name, or a typo)."""
    modes = {m.value: m for m in MODES}
    like_mode = difflib.get_close_matches(name, modes, n=1, cutoff=0.8)
    if like_mode:
        mode = modes[like_mode[0]]
        if mode.eager_mode is None:
            return (
                f"%tpu: {name!r} is not a subcommand. Compiled code is a function or model under "
                'torch.compile(fn, backend="tpu"), not a mode of a session or a cell; '
                f"%%tpu mode {FUSE.value} runs a cell in {FUSE.label} (TorchTPU's eager compile "
                "cache)."
            )
        return (
            f"%tpu: {name!r} is a mode, not a subcommand: %tpu mode {mode.value} switches the "
            f"session to it, %%tpu mode {mode.value} one cell."
        )
    close = difflib.get_close_matches(name, COMMANDS, n=1)
    hint = f"Did you mean %tpu {close[0]}? " if close else ""
    return (
        f"%tpu: unknown subcommand {name!r}. {hint}Subcommands: {', '.join(COMMANDS)} "
        "(%tpu --help describes them)."
    )


def error(name: str, message: str) -> UsageError:
    """``%tpu NAME: MESSAGE``, the subcommand's usage and where its options are explained."""
    return UsageError(
        f"%tpu {name}: {message}\n{parser(name).format_usage().strip()}\n"
        f"(%tpu {name} --help explains every option)"
    )


@contextlib.contextmanager
def shown_as_usage_errors():
    """A TpuLabError from a delegate becomes a UsageError: its message, no traceback."""
    try:
        yield
    except TpuLabError as exc:
        raise UsageError(str(exc)) from None


def module(name: str):
    """Import a delegate module; if this installation lacks it, say so in a UsageError."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name and name.startswith(exc.name):
            from .. import _install

            raise UsageError(
                f"{name} is not part of this installation of tpu_lab; upgrade tpu-lab "
                f"({_install.hint(flags='-U')})."
            ) from None
        raise


# --- tab completion -------------------------------------------------------------------------


def completions(line: str, names: Iterable[str] = ()) -> list[str]:
    """What may follow ``line`` (a ``%tpu`` line up to the cursor); ``names`` are the user's
    variables, offered where a subcommand takes one."""
    words = line.split()
    if line.endswith((" ", "\t")) or len(words) < 2:
        words.append("")
    current, args = words[-1], words[1:]
    if len(args) == 1:
        return [n for n in [*COMMANDS, "--help"] if n.startswith(current)]
    command = COMMANDS.get(args[0])
    if command is None:
        return []
    try:
        given, at = _given(args[0], glue_numbers(args[0], args[1:-1]))
    except ValueError:  # argparse refuses the words before the cursor
        return []
    if at is not None and (at.flags[0].startswith("-") or not current.startswith("-")):
        candidates = list(at.options.get("choices") or _complete(at.complete, names))
    elif current.startswith("-"):
        dests = _given_parser(args[0]).dests
        unused = [f for arg, dest in dests if dest not in given for f in arg.flags]
        candidates = [f for f in [*unused, "--help"] if f.startswith("-")]
    else:
        return []
    return [c for c in candidates if c.startswith(current)]


def _topologies() -> list[str]:
    from ..hardware.topology import GENERATIONS

    return [f"{g.name}-{n}" for g in GENERATIONS.values() for n in g.topologies]


def _complete(kind: str | None, names: Iterable[str]) -> list[str]:
    if kind == "topology":
        return _topologies()
    if kind == "variable":
        return sorted(n for n in names if not n.startswith("_"))
    return []
