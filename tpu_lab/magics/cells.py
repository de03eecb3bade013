"""``%tpu preview``, ``%%tpu time``, ``%%tpu profile`` and ``%tpu parity``: what a cell made and
how it ran."""

from __future__ import annotations

from IPython.display import display

from ..views import lookup
from .parsing import error, module, shown_as_usage_errors
from .table import Arg, subcommand


@subcommand(
    "preview",
    "show the image(s), latents or video frames in variable VAR",
    Arg(("var",), {"metavar": "VAR"}, "variable"),
    Arg(("--range",), {"dest": "value_range", "metavar": "RANGE",
                       "help": "0,1 | -1,1 | uint8 | minmax (default: detected)"}),
    Arg(("--fps",), {"type": int, "metavar": "N", "help": "frames per second of a video"}),
    Arg(("--save",), {"metavar": "PATH", "help": "also write the file"}),
)  # fmt: skip
def preview(magics, args, cell):
    obj = magics.lookup(args.var, "preview")
    if args.fps is not None and args.fps < 1:
        raise error("preview", f"--fps must be 1 or more, got {args.fps}")
    media = module("tpu_lab.media")
    options = {"value_range": args.value_range, "save": args.save}
    if args.fps is not None:
        options["fps"] = args.fps
    with shown_as_usage_errors():
        display(lookup.view(media.preview(obj, **options)))


@subcommand(
    "time",
    "run this cell and time it: device-synchronised, compile time split from run time; on the "
    "bundled device, its estimated time on an idealised TPU chip beside it",
    line=False,
    cell=True,
)
def time(magics, args, cell):
    __tracebackhide__ = True  # noqa: F841
    from ..timing import timed

    with timed("cell") as timing:
        value = magics.run_cell(cell)
    print(timing)
    return value


@subcommand(
    "profile",
    "run this cell and profile it: a timeline of its ops, sync points, compilations, cache "
    "hits/misses and transfers, and a per-op table (host time); on the bundled device also an "
    "estimated TPU track and the estimate's per-op table (FLOPs, HBM bytes, arithmetic "
    "intensity, bound); the profile is kept in the variable _tpu_profile",
    Arg(("--trace",), {"metavar": "PATH", "help": "also write a Chrome/Perfetto trace (.json)"}),
    Arg(("--top",), {"type": int, "default": 12, "metavar": "N",
                     "help": "ops in the table (default 12)"}),
    line=False,
    cell=True,
)  # fmt: skip
def profile(magics, args, cell):
    __tracebackhide__ = True  # noqa: F841
    if args.top < 1:
        raise error("profile", f"--top must be 1 or more, got {args.top}")
    if args.trace is not None and not args.trace.endswith(".json"):
        raise error("profile", f"--trace writes a .json trace, got {args.trace!r}")
    from ..events.context import ipython_cell
    from ..profiler import Recorder

    number = ipython_cell()
    recorder = Recorder(f"cell In[{number}]" if number is not None else "cell")
    with recorder:
        value = magics.run_cell(cell)
    profiled = recorder.profile
    magics.shell.user_ns["_tpu_profile"] = profiled
    if args.trace is not None:
        profiled.export_chrome_trace(args.trace)
    display(lookup.view(profiled, top=args.top))
    if args.trace is not None:
        print(f"Chrome trace written to {args.trace} (open it at https://ui.perfetto.dev)")
    return value


@subcommand(
    "parity",
    "each layer of MODEL run on INPUTS on \"tpu\" and on the CPU: forward output and gradient "
    "differences",
    Arg(("model",), {"metavar": "MODEL"}, "variable"),
    Arg(("inputs",), {"metavar": "INPUTS"}, "variable"),
    Arg(("--no-backward",), {"action": "store_true", "help": "compare the forward pass only"}),
)  # fmt: skip
def parity(magics, args, cell):
    model = magics.lookup(args.model, "parity")
    inputs = magics.lookup(args.inputs, "parity")
    numerics = module("tpu_lab.numerics")
    with shown_as_usage_errors():
        display(numerics.parity(model, inputs, backward=not args.no_backward))
