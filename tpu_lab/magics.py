"""The ``%tpu`` line and ``%%tpu`` cell magic: parse the arguments, delegate, show the result.

Each subcommand is declared once in :data:`COMMANDS` (its help, its arguments, whether it takes
a cell); the parsers (IPython's ``MagicArgumentParser``), ``%tpu?`` / ``%tpu --help`` and tab
completion are all built from that table. The work is done by :mod:`tpu_lab.session`, the
views and the sharding, cluster, media and dashboard modules, imported when first used; what
they return is shown as its view (:func:`tpu_lab.views.view`). Bad input and errors of those
modules (``TpuLabError``) are shown as a ``UsageError``: one message with the fix, no traceback.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import difflib
import importlib
import os
import re
import textwrap
from collections.abc import Iterable
from dataclasses import dataclass, field

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class
from IPython.core.magic_arguments import (
    MagicArgumentParser,
    argument,
    kwds,
    magic_arguments,
)
from IPython.display import Image, display
from IPython.utils.process import arg_split

from .errors import TpuLabError
from .events import KINDS
from .session import EAGER_MODES, FUSE, MODES
from .views import lookup


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


_MODES = tuple(m.value for m in EAGER_MODES)
#: What ``%tpu plan --estimate`` estimates (tpu_lab.estimate.planner.TASKS), or nothing.
_ESTIMATES = ("forward", "train", "decode", "none")


def _image_size(text: str) -> tuple[int, int]:
    """``'1024x768'`` -> (1024, 768); ``'512'`` -> (512, 512)."""
    parts = text.lower().split("x")
    if len(parts) in (1, 2) and all(p.isdigit() and int(p) > 0 for p in parts):
        return (int(parts[0]), int(parts[-1]))
    raise argparse.ArgumentTypeError(
        f"{text!r} is not an image size: give HEIGHTxWIDTH in pixels, e.g. 1024x1024 (or 1024)"
    )

_CELL = ("%%tpu mode MODE", "%%tpu time", "%%tpu profile", "%%tpu spmd")

COMMANDS: dict[str, Command] = {
    c.name: c
    for c in (
        Command(
            "status",
            "backend, generation, chips, topology, HBM per chip, eager mode, compile-cache hit "
            "rate and the latest events (also plain %tpu)",
            (Arg(("--recent",), {"type": int, "default": 5, "metavar": "N",
                                 "help": "how many recent events to show (default 5)"}),),
        ),  # fmt: skip
        Command(
            "use",
            "simulate a topology on the bundled device: %tpu use v6e-4, or --generation/--chips "
            "(refused on a real TPU, where the hardware decides)",
            (
                Arg(
                    ("topology",),
                    {"nargs": "?", "metavar": "TOPOLOGY", "help": "e.g. v6e-4, v5e-8, v4-2"},
                    "topology",
                ),
                Arg(("--generation",), {"help": "v4, v5e, v5p, v6e or v7"}),
                Arg(("--chips",), {"type": int, "metavar": "N",
                                   "help": "devices in the topology, e.g. 4"}),
            ),
        ),
        Command(
            "mode",
            "the eager mode for the session (%tpu mode fuse) or one cell (%%tpu mode fuse; the "
            "previous mode comes back after the cell, also when it raises): "
            + "; ".join(f"{m.value} = {m.meaning}" for m in EAGER_MODES)
            + "; no mode: show the current one. Compiled code is a function or model under "
            'torch.compile(fn, backend="tpu"), not a mode of the session',
            (Arg(("mode",), {"nargs": "?", "choices": _MODES, "help": "|".join(_MODES)}),),
            cell=True,
        ),
        Command(
            "events",
            "the event log, optionally of one cell or kind",
            (
                Arg(("--cell",), {"type": int, "metavar": "N", "help": "only cell In [N]"}),
                Arg(("--kind",), {"choices": KINDS, "metavar": "KIND", "help": ", ".join(KINDS)}),
                Arg(("--last",), {"type": int, "metavar": "N", "help": "only the newest N"}),
            ),
        ),
        Command(
            "explain",
            "why recompile or cache-miss event N happened (default: the latest)",
            (Arg(("seq",), {"nargs": "?", "type": int, "metavar": "N",
                           "help": "the event's number (the # column of %%tpu events)"}),),
        ),
        Command(
            "recompiles",
            "compilations and recompilations over time and cells, with what changed",
            (
                Arg(("--cell",), {"type": int, "metavar": "N", "help": "only cell In [N]"}),
                Arg(("--plot",), {"action": "store_true", "help": "a static image (matplotlib)"}),
            ),
        ),
        Command(
            "memory",
            "HBM per chip: live, peak, capacity",
            (Arg(("--plot",), {"action": "store_true", "help": "a static image (matplotlib)"}),),
        ),
        Command(
            "sharding",
            "how the tensor or model in variable VAR is laid out over the chips",
            (Arg(("var",), {"metavar": "VAR"}, "variable"),),
        ),
        Command(
            "plan",
            "plan how MODEL (a config, a model on the meta device, or a path) fits on the chips "
            "and, given a step (--batch and --seq, or --image-size), estimate its time",
            (
                Arg(("model",), {"metavar": "MODEL"}, "variable"),
                Arg(("--chips",), {"type": int, "metavar": "N",
                                   "help": "default: the current topology's"}),
                Arg(("--generation",), {"help": "default: the current topology's"}),
                Arg(("--batch",), {"type": int, "metavar": "B"}),
                Arg(("--seq",), {"type": int, "metavar": "S"}),
                Arg(("--image-size",), {"type": _image_size, "metavar": "HxW",
                                        "help": "an image model's pixels, e.g. 1024x1024 "
                                                "(batch 1 unless --batch)"}),
                Arg(("--frames",), {"type": int, "metavar": "N",
                                    "help": "a video model's frames, e.g. 81"}),
                Arg(("--dtype",), {"choices": ("float32", "bfloat16", "float16"),
                                   "help": "weights' dtype (default: the model's)"}),
                Arg(("--estimate",), {"choices": _ESTIMATES,
                                      "help": "the step's estimated time and throughput on an "
                                              "idealised chip (not a measurement): "
                                              + "|".join(_ESTIMATES) + " (default: forward when "
                                              "--batch and --seq or --image-size are given, "
                                              "else none)"}),
            ),
        ),
        Command(
            "cluster",
            "one process per chip: start TOPOLOGY (default: the current one; a pod slice such "
            "as v6e-16 runs its hosts on this machine), connect to an ipyparallel cluster "
            "started outside (engines on one host or several), stop, restart, status",
            (
                Arg(("action",), {"nargs": "?", "default": "status",
                                  "choices": ("start", "connect", "stop", "restart", "status")}),
                Arg(("topology",), {"nargs": "?", "metavar": "TOPOLOGY",
                                    "help": "for start (or connect), e.g. v6e-4, v6e-16"},
                    "topology"),
                Arg(("--profile",), {"metavar": "NAME",
                                     "help": "for connect: the cluster's ipython profile"}),
                Arg(("--cluster-id",), {"metavar": "ID",
                                        "help": "for connect: the cluster's id"}),
                Arg(("--url-file",), {"metavar": "PATH",
                                      "help": "for connect: its ipcontroller-client.json"}),
            ),  # fmt: skip
        ),
        Command(
            "spmd",
            "run this cell on every rank of the cluster; shows rank 0's output and the sharding",
            line=False,
            cell=True,
        ),
        Command(
            "preview",
            "show the image(s), latents or video frames in variable VAR",
            (
                Arg(("var",), {"metavar": "VAR"}, "variable"),
                Arg(("--range",), {"dest": "value_range", "metavar": "RANGE",
                                   "help": "0,1 | -1,1 | uint8 | minmax (default: detected)"}),
                Arg(("--fps",), {"type": int, "metavar": "N",
                                 "help": "frames per second of a video"}),
                Arg(("--save",), {"metavar": "PATH", "help": "also write the file"}),
            ),  # fmt: skip
        ),
        Command(
            "time",
            "run this cell and time it: device-synchronised, compile time split from run time; "
            "on the bundled device, its estimated time on an idealised TPU chip beside it",
            line=False,
            cell=True,
        ),
        Command(
            "profile",
            "run this cell and profile it: a timeline of its ops, sync points, compilations, "
            "cache hits/misses and transfers, and a per-op table (host time); on the bundled "
            "device also an estimated TPU track and the estimate's per-op table (FLOPs, HBM "
            "bytes, arithmetic intensity, bound); the profile is kept in the variable "
            "_tpu_profile",
            (
                Arg(("--trace",), {"metavar": "PATH",
                                   "help": "also write a Chrome/Perfetto trace (.json)"}),
                Arg(("--top",), {"type": int, "default": 12, "metavar": "N",
                                 "help": "ops in the table (default 12)"}),
            ),  # fmt: skip
            line=False,
            cell=True,
        ),
        Command(
            "parity",
            "each layer of MODEL run on INPUTS on \"tpu\" and on the CPU: forward output and "
            "gradient differences",
            (
                Arg(("model",), {"metavar": "MODEL"}, "variable"),
                Arg(("inputs",), {"metavar": "INPUTS"}, "variable"),
                Arg(("--no-backward",), {"action": "store_true",
                                         "help": "compare the forward pass only"}),
            ),  # fmt: skip
        ),
        Command("doctor", "the environment and every misconfiguration with its fix"),
        Command(
            "reset",
            "clear the event log, torch.compile's graphs (torch._dynamo.reset()) and the eager "
            "compile cache and its statistics",
        ),
        Command("dashboard", "the live dashboard: HBM gauges, mode toggle, cache, event feed"),
    )
}


class _Given(argparse.ArgumentParser):
    """A subcommand's arguments without types, choices, defaults or required ones: argparse
    then says which arguments some words give (by its own rules: abbreviations,
    ``--option=value``, switches) and never stops at a value; what tab completion and
    :func:`_glue_numbers` ask."""

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


_GIVEN = {name: _Given(command) for name, command in COMMANDS.items()}
_CURSOR = "\x00next"  # stands for the word after the given ones


def _given(name: str, words: list[str]) -> tuple[dict, Arg | None]:
    """What ``words`` give subcommand ``name`` (attribute -> value, as argparse reads them), and
    the argument the next word would be (None: no argument takes it); ValueError when argparse
    refuses the words."""
    parser = _GIVEN[name]
    given = vars(parser.parse_known_args([*words, _CURSOR])[0])
    return given, next((arg for arg, dest in parser.dests if given.get(dest) == _CURSOR), None)


_NUMBER = re.compile(r"-\.?\d")  # "-1,1", "-0.5": a value, though it starts with "-"


def _glue_numbers(name: str, tokens: list[str]) -> list[str]:
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


def _usage(command: Command) -> str:
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


def _parser(command: Command) -> MagicArgumentParser:
    parser = MagicArgumentParser(
        prog=_prog(command),
        usage="%(prog)s" + _usage(command).removeprefix(_prog(command)),
        description=command.help,
        formatter_class=argparse.HelpFormatter,
    )
    for arg in command.args:
        parser.add_argument(*arg.flags, **arg.options)
    return parser


PARSERS = {name: _parser(command) for name, command in COMMANDS.items()}


def _overview() -> str:
    lines = [
        "tpu_lab: the TPU device, its compilations and its memory, from a notebook.",
        "",
        "%tpu SUBCOMMAND [options]   (plain %tpu: status)",
        "%%tpu SUBCOMMAND            (a cell: " + ", ".join(_CELL) + ")",
        "%tpu SUBCOMMAND --help      (a subcommand's options)",
        "",
    ]
    for command in COMMANDS.values():
        lines.append(f"  {_usage(command)}")
        lines += textwrap.wrap(command.help, 96, initial_indent=" " * 6, subsequent_indent=" " * 6)
    return "\n".join(lines)


def _unknown(name: str) -> str:
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


def _error(name: str, message: str) -> UsageError:
    parser = PARSERS[name]
    return UsageError(
        f"%tpu {name}: {message}\n{parser.format_usage().strip()}\n"
        f"(%tpu {name} --help explains every option)"
    )


@contextlib.contextmanager
def _shown_as_usage_errors():
    """A TpuLabError from a delegate becomes a UsageError: its message, no traceback."""
    try:
        yield
    except TpuLabError as exc:
        raise UsageError(str(exc)) from None


def _module(name: str):
    """Import a delegate module; if this installation lacks it, say so in a UsageError."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name and name.startswith(exc.name):
            from . import _install

            raise UsageError(
                f"{name} is not part of this installation of tpu_lab; upgrade tpu-lab "
                f"({_install.hint(flags='-U')})."
            ) from None
        raise


@magics_class
class TpuMagics(Magics):
    """The ``%tpu`` magics. ``%tpu --help`` lists the subcommands."""

    @magic_arguments()
    @kwds(description=_overview())
    @argument("subcommand", nargs="?", default="status", help="one of: " + ", ".join(COMMANDS))
    @argument("options", nargs="*", help="the subcommand's arguments (%%tpu SUBCOMMAND --help)")
    @line_cell_magic
    def tpu(self, line: str, cell: str | None = None):
        __tracebackhide__ = True  # noqa: F841
        try:
            tokens = arg_split(line, strict=True)
        except ValueError as exc:
            raise UsageError(f"%tpu: cannot read {line!r}: {exc}; check the quotes.") from None
        if cell is not None and not tokens:
            raise UsageError("%%tpu needs a subcommand: " + ", ".join(_CELL) + ".")
        name = tokens[0] if tokens else "status"
        if name in ("-h", "--help", "help"):
            print(self.tpu.__doc__.removeprefix("::\n\n"))  # the docstring is reST
            return None
        command = COMMANDS.get(name)
        if command is None:
            raise UsageError(_unknown(name))
        if "-h" in tokens[1:] or "--help" in tokens[1:]:
            print(PARSERS[name].format_help())
            return None
        if cell is not None and not command.cell:
            raise UsageError(
                f"%%tpu {name} does not run a cell: write %tpu {name} on a line of its own. "
                f"Cell subcommands: {', '.join(_CELL)}."
            )
        if cell is None and not command.line:
            raise UsageError(
                f"%tpu {name} needs a cell: put %%tpu {name} on the first line of the cell."
            )
        try:
            args = PARSERS[name].parse_args(_glue_numbers(name, tokens[1:]))
        except UsageError as exc:
            raise _error(name, str(exc)) from None
        if any(isinstance(value, list) for value in vars(args).values()):
            raise _error(name, "'--' is not a value")  # argparse hands [] where "--" stood
        return getattr(self, f"_{name}")(args, cell)

    # --- running a cell ---------------------------------------------------------------------

    def _run(self, cell: str):
        """Run ``cell`` in the user's namespace like a cell: IPython syntax, its lines in
        tracebacks, the value of a last expression returned (shown as ``Out[N]``)."""
        __tracebackhide__ = True  # noqa: F841 - IPython leaves this frame out of tracebacks
        from .events.context import ipython_cell

        shell = self.shell
        source = shell.transform_cell(cell)
        tree = shell.transform_ast(shell.compile.ast_parse(source))
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body.pop().value)
        number = ipython_cell()
        filename = shell.compile.cache(
            source, shell.execution_count if number is None else number, raw_code=cell
        )
        exec(shell.compile(tree, filename, "exec"), shell.user_global_ns, shell.user_ns)
        if last is None:
            return None
        value = eval(shell.compile(last, filename, "eval"), shell.user_global_ns, shell.user_ns)
        return None if cell.rstrip().endswith(";") else value

    def _lookup(self, name: str, command: str):
        """The value of variable ``name`` (``a.b`` for an attribute) in the user namespace."""
        parts = name.split(".")
        if not all(p.isidentifier() for p in parts):
            raise _error(command, f"{name!r} is not a variable name")
        if any(p.startswith("__") for p in parts[1:]):
            raise _error(command, f"{name!r}: special attributes (__name__) are not looked up")
        namespace = self.shell.user_ns
        if parts[0] not in namespace:
            raise UsageError(
                f"%tpu {command}: no variable named {parts[0]!r} in the notebook; run the cell "
                "that defines it first, or check the spelling."
            )
        value = namespace[parts[0]]
        for i, part in enumerate(parts[1:], 1):
            if not hasattr(value, part):
                raise UsageError(
                    f"%tpu {command}: {'.'.join(parts[:i])} has no attribute {part!r}."
                )
            value = getattr(value, part)
        return value

    # --- subcommands ------------------------------------------------------------------------

    def _status(self, args, cell):
        from .views import StatusView

        if args.recent < 0:
            raise _error("status", f"--recent must be 0 or more, got {args.recent}")
        with _shown_as_usage_errors():
            display(StatusView.current(args.recent))

    def _use(self, args, cell):
        from . import session

        with _shown_as_usage_errors():
            described = session.use(args.topology, generation=args.generation, chips=args.chips)
        print(f"Simulating {described}.")

    def _mode(self, args, cell):
        __tracebackhide__ = True  # noqa: F841
        from . import session

        if cell is not None:
            if args.mode is None:
                raise _error("mode", "%%tpu mode needs a mode for the cell")
            with _shown_as_usage_errors():
                scope = session.mode(args.mode)
            with scope:
                return self._run(cell)
        if args.mode is None:
            current = session.current_mode()
            known = session.mode_of(current)
            print(
                f"eager mode: {current.name}{f' ({known.value})' if known else ''}; "
                f"choose with %tpu mode {'|'.join(_MODES)}"
            )
            return None
        with _shown_as_usage_errors():
            old, new = session.set_mode(args.mode)
        print(f"eager mode: {new} (was {old})")
        return None

    def _events(self, args, cell):
        from .events import log
        from .views import EventLogView

        if args.last is not None and args.last < 1:
            raise _error("events", f"--last must be 1 or more, got {args.last}")
        events = log.events(args.kind, args.cell)
        title = "tpu_lab events" + "".join(
            f" {label} {value}" for label, value in (("of kind", args.kind), ("in cell", args.cell))
            if value is not None
        )  # fmt: skip
        display(EventLogView(events[-args.last:] if args.last else events, title))

    def _explain(self, args, cell):
        from .views.events import explain

        with _shown_as_usage_errors():
            view = explain(args.seq)
        display(view)

    def _recompiles(self, args, cell):
        from .views import RecompileTimelineView

        view = RecompileTimelineView.current(args.cell)
        display(Image(data=view.png(), format="png") if args.plot else view)

    def _memory(self, args, cell):
        from .views import MemoryView

        with _shown_as_usage_errors():
            view = MemoryView.current()
        display(Image(data=view.png(), format="png") if args.plot else view)

    def _sharding(self, args, cell):
        obj = self._lookup(args.var, "sharding")
        sharding = _module("tpu_lab.sharding")
        with _shown_as_usage_errors():
            display(sharding.view(obj))

    def _plan(self, args, cell):
        if args.model in self.shell.user_ns or not os.path.exists(args.model):
            model = self._lookup(args.model, "plan")
        else:
            model = args.model  # a path to a saved model or config
        chips, generation = args.chips, args.generation
        if chips is None or generation is None:
            from . import session

            with _shown_as_usage_errors():
                current_generation, current_chips = session.current_topology()
            generation = generation or current_generation
            chips = chips or current_chips
        step = args.image_size is not None or (args.batch is not None and args.seq is not None)
        task = args.estimate or ("forward" if step else "none")
        if task != "none" and not step:
            raise _error("plan", f"--estimate {task} needs the work of one step: give --batch "
                                 "and --seq (or --image-size for an image model)")
        sharding = _module("tpu_lab.sharding")
        with _shown_as_usage_errors():
            plan = sharding.plan(
                model,
                chips=chips,
                generation=generation,
                batch=args.batch,
                seq=args.seq,
                dtype=None if args.dtype is None else getattr(_module("torch"), args.dtype),
                image_size=args.image_size,
                frames=args.frames,
            )
            estimate = None if task == "none" else plan.estimate(task)
            display(sharding.view(plan, estimate=estimate))

    def _cluster(self, args, cell):
        cluster = _module("tpu_lab.launch.cluster")
        if args.topology is not None and args.action not in ("start", "connect"):
            raise _error("cluster", f"only start and connect take a topology, not {args.action}")
        where = {"profile": args.profile, "cluster_id": args.cluster_id,
                 "url_file": args.url_file}  # fmt: skip
        if args.action != "connect" and any(where.values()):
            raise _error("cluster", "--profile, --cluster-id and --url-file are for connect")
        with _shown_as_usage_errors():
            if args.action == "connect":
                connect = _module("tpu_lab.launch.connect")
                result = connect.connect(**where, topology=args.topology)
            elif args.action == "start":
                topology = args.topology
                if topology is None:
                    from .runtime import backend

                    topology = backend().status().topology
                result = cluster.start(topology)
            elif args.action == "stop":
                result = cluster.stop()
            elif args.action == "restart":
                result = cluster.restart()
            else:
                result = cluster.current()
        if result is None:
            print(f"cluster: {args.action} done")
        else:
            display(lookup.view(result))

    def _spmd(self, args, cell):
        cluster = _module("tpu_lab.launch.cluster")
        with _shown_as_usage_errors():
            display(lookup.view(cluster.current().run_cell(cell)))

    def _preview(self, args, cell):
        obj = self._lookup(args.var, "preview")
        if args.fps is not None and args.fps < 1:
            raise _error("preview", f"--fps must be 1 or more, got {args.fps}")
        media = _module("tpu_lab.media")
        options = {"value_range": args.value_range, "save": args.save}
        if args.fps is not None:
            options["fps"] = args.fps
        with _shown_as_usage_errors():
            display(lookup.view(media.preview(obj, **options)))

    def _time(self, args, cell):
        __tracebackhide__ = True  # noqa: F841
        from .timing import timed

        with timed("cell") as timing:
            value = self._run(cell)
        print(timing)
        return value

    def _profile(self, args, cell):
        __tracebackhide__ = True  # noqa: F841
        if args.top < 1:
            raise _error("profile", f"--top must be 1 or more, got {args.top}")
        if args.trace is not None and not args.trace.endswith(".json"):
            raise _error("profile", f"--trace writes a .json trace, got {args.trace!r}")
        from .events.context import ipython_cell
        from .profiler import Recorder

        number = ipython_cell()
        recorder = Recorder(f"cell In[{number}]" if number is not None else "cell")
        with recorder:
            value = self._run(cell)
        profile = recorder.profile
        self.shell.user_ns["_tpu_profile"] = profile
        if args.trace is not None:
            profile.export_chrome_trace(args.trace)
        display(lookup.view(profile, top=args.top))
        if args.trace is not None:
            print(f"Chrome trace written to {args.trace} (open it at https://ui.perfetto.dev)")
        return value

    def _parity(self, args, cell):
        model = self._lookup(args.model, "parity")
        inputs = self._lookup(args.inputs, "parity")
        numerics = _module("tpu_lab.numerics")
        with _shown_as_usage_errors():
            display(numerics.parity(model, inputs, backward=not args.no_backward))

    def _doctor(self, args, cell):
        from .doctor import diagnose

        print(diagnose())

    def _reset(self, args, cell):
        from . import session

        with _shown_as_usage_errors():
            done = session.reset()
        print("Reset:\n" + "\n".join(f"  {line}" for line in done))

    def _dashboard(self, args, cell):
        dashboard = _module("tpu_lab.views.dashboard")
        with _shown_as_usage_errors():
            display(dashboard.Dashboard())


# --- tab completion -------------------------------------------------------------------------


def _topologies() -> list[str]:
    from .device.topology import GENERATIONS

    return [f"{g.name}-{n}" for g in GENERATIONS.values() for n in g.topologies]


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
        given, at = _given(args[0], _glue_numbers(args[0], args[1:-1]))
    except ValueError:  # argparse refuses the words before the cursor
        return []
    if at is not None and (at.flags[0].startswith("-") or not current.startswith("-")):
        candidates = list(at.options.get("choices") or _complete(at.complete, names))
    elif current.startswith("-"):
        dests = _GIVEN[args[0]].dests
        unused = [f for arg, dest in dests if dest not in given for f in arg.flags]
        candidates = [f for f in [*unused, "--help"] if f.startswith("-")]
    else:
        return []
    return [c for c in candidates if c.startswith(current)]


def _complete(kind: str | None, names: Iterable[str]) -> list[str]:
    if kind == "topology":
        return _topologies()
    if kind == "variable":
        return sorted(n for n in names if not n.startswith("_"))
    return []


def _completer(shell, event) -> list[str]:
    return completions(event.text_until_cursor, list(shell.user_ns))


def register(shell) -> None:
    """Register ``%tpu``/``%%tpu`` and their tab completion with ``shell`` (idempotent)."""
    if "TpuMagics" in shell.magics_manager.registry:
        return
    shell.register_magics(TpuMagics)
    for key in ("%tpu", "%%tpu"):
        shell.set_hook("complete_command", _completer, str_key=key)
    lookup.register_formatters(shell)  # data objects left as a cell's value show as their views
    from .events.context import follow

    follow(shell)  # cell numbers for events, and each cell's compilations when it ends
