"""``%tpu status``, ``%tpu use`` and ``%tpu mode``: the device, its topology and how it runs."""

from __future__ import annotations

from IPython.display import display

from ..session import EAGER_MODES
from .parsing import error, shown_as_usage_errors
from .table import Arg, subcommand

MODE_NAMES = tuple(m.value for m in EAGER_MODES)


@subcommand(
    "status",
    "backend, generation, chips, topology, HBM per chip, eager mode, compile-cache hit rate and "
    "the latest events (also plain %tpu)",
    Arg(("--recent",), {"type": int, "default": 5, "metavar": "N",
                        "help": "how many recent events to show (default 5)"}),
)  # fmt: skip
def status(magics, args, cell):
    from ..views import StatusView

    if args.recent < 0:
        raise error("status", f"--recent must be 0 or more, got {args.recent}")
    with shown_as_usage_errors():
        display(StatusView.current(args.recent))


@subcommand(
    "use",
    "simulate a topology on the bundled device: %tpu use v6e-4, or --generation/--chips "
    "(refused on a real TPU, where the hardware decides)",
    Arg(("topology",), {"nargs": "?", "metavar": "TOPOLOGY", "help": "e.g. v6e-4, v5e-8, v4-2"},
        "topology"),
    Arg(("--generation",), {"help": "v4, v5e, v5p, v6e or v7"}),
    Arg(("--chips",), {"type": int, "metavar": "N", "help": "devices in the topology, e.g. 4"}),
)  # fmt: skip
def use(magics, args, cell):
    from .. import session

    with shown_as_usage_errors():
        described = session.use(args.topology, generation=args.generation, chips=args.chips)
    print(f"Simulating {described}.")


@subcommand(
    "mode",
    "the eager mode for the session (%tpu mode fuse) or one cell (%%tpu mode fuse; the previous "
    "mode comes back after the cell, also when it raises): "
    + "; ".join(f"{m.value} = {m.meaning}" for m in EAGER_MODES)
    + "; no mode: show the current one. Compiled code is a function or model under "
    'torch.compile(fn, backend="tpu"), not a mode of the session',
    Arg(("mode",), {"nargs": "?", "choices": MODE_NAMES, "help": "|".join(MODE_NAMES)}),
    cell=True,
)
def mode(magics, args, cell):
    __tracebackhide__ = True  # noqa: F841
    from .. import session

    if cell is not None:
        if args.mode is None:
            raise error("mode", "%%tpu mode needs a mode for the cell")
        with shown_as_usage_errors():
            scope = session.mode(args.mode)
        with scope:
            return magics.run_cell(cell)
    if args.mode is None:
        current = session.current_mode()
        known = session.mode_of(current)
        print(
            f"eager mode: {current.name}{f' ({known.value})' if known else ''}; "
            f"choose with %tpu mode {'|'.join(MODE_NAMES)}"
        )
        return None
    with shown_as_usage_errors():
        old, new = session.set_mode(args.mode)
    print(f"eager mode: {new} (was {old})")
    return None
