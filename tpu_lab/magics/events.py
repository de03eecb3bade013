"""``%tpu events``, ``%tpu explain`` and ``%tpu recompiles``: what happened, and why."""

from __future__ import annotations

from IPython.display import Image, display

from ..events import KINDS
from .parsing import error, shown_as_usage_errors
from .table import Arg, subcommand


@subcommand(
    "events",
    "the event log, optionally of one cell or kind",
    Arg(("--cell",), {"type": int, "metavar": "N", "help": "only cell In [N]"}),
    Arg(("--kind",), {"choices": KINDS, "metavar": "KIND", "help": ", ".join(KINDS)}),
    Arg(("--last",), {"type": int, "metavar": "N", "help": "only the newest N"}),
)
def events(magics, args, cell):
    from ..events import log
    from ..views import EventLogView

    if args.last is not None and args.last < 1:
        raise error("events", f"--last must be 1 or more, got {args.last}")
    found = log.events(args.kind, args.cell)
    title = "tpu_lab events" + "".join(
        f" {label} {value}" for label, value in (("of kind", args.kind), ("in cell", args.cell))
        if value is not None
    )  # fmt: skip
    display(EventLogView(found[-args.last:] if args.last else found, title))


@subcommand(
    "explain",
    "why recompile, cache-miss or graph-break event N happened (default: the latest)",
    Arg(("seq",), {"nargs": "?", "type": int, "metavar": "N",
                   "help": "the event's number (the # column of %%tpu events)"}),
)  # fmt: skip
def explain(magics, args, cell):
    from ..views.events import explain as explanation

    with shown_as_usage_errors():
        view = explanation(args.seq)
    display(view)


@subcommand(
    "recompiles",
    "compilations and recompilations over time and cells, with what changed",
    Arg(("--cell",), {"type": int, "metavar": "N", "help": "only cell In [N]"}),
    Arg(("--plot",), {"action": "store_true", "help": "a static image (matplotlib)"}),
)
def recompiles(magics, args, cell):
    from ..views import RecompileTimelineView

    view = RecompileTimelineView.current(args.cell)
    display(Image(data=view.png(), format="png") if args.plot else view)
