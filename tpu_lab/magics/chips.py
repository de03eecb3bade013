"""``%tpu memory``, ``%tpu sharding``, ``%tpu plan``, ``%tpu cluster`` and ``%%tpu spmd``: HBM,
how tensors and models are laid out over the chips, and one process per chip."""

from __future__ import annotations

import os

from IPython.display import Image, display

from ..views import lookup
from .parsing import error, image_size, module, shown_as_usage_errors
from .table import Arg, subcommand

#: What ``%tpu plan --estimate`` estimates (tpu_lab.sharding.step_estimate.TASKS), or nothing.
ESTIMATES = ("forward", "train", "decode", "none")
RUN_MODES = ("eager", "fuse", "compiled")
REMATS = ("none", "full", "dots")


@subcommand(
    "memory",
    "HBM per chip: live, peak, capacity",
    Arg(("--plot",), {"action": "store_true", "help": "a static image (matplotlib)"}),
)
def memory(magics, args, cell):
    from ..views import MemoryView

    with shown_as_usage_errors():
        view = MemoryView.current()
    display(Image(data=view.png(), format="png") if args.plot else view)


@subcommand(
    "sharding",
    "how the tensor or model in variable VAR is laid out over the chips",
    Arg(("var",), {"metavar": "VAR"}, "variable"),
)
def sharding(magics, args, cell):
    obj = magics.lookup(args.var, "sharding")
    views = module("tpu_lab.views.sharding")
    with shown_as_usage_errors():
        display(views.view(obj))


@subcommand(
    "plan",
    "plan how MODEL (a config, a model on the meta device, or a path) fits on the chips and, "
    "given a step (--batch and --seq, or --image-size), estimate its time",
    Arg(("model",), {"metavar": "MODEL"}, "variable"),
    Arg(("--chips",), {"type": int, "metavar": "N", "help": "default: the current topology's"}),
    Arg(("--generation",), {"help": "default: the current topology's"}),
    Arg(("--batch",), {"type": int, "metavar": "B"}),
    Arg(("--seq",), {"type": int, "metavar": "S"}),
    Arg(("--image-size",), {"type": image_size, "metavar": "HxW",
                            "help": "an image model's pixels, e.g. 1024x1024 (batch 1 unless "
                                    "--batch)"}),
    Arg(("--frames",), {"type": int, "metavar": "N", "help": "a video model's frames, e.g. 81"}),
    Arg(("--dtype",), {"choices": ("float32", "bfloat16", "float16"),
                       "help": "weights' dtype (default: the model's)"}),
    Arg(("--estimate",), {"choices": ESTIMATES,
                          "help": "the step's estimated time, throughput and peak HBM per chip "
                                  "on an idealised chip (not a measurement): "
                                  + "|".join(ESTIMATES) + " (default: forward when --batch and "
                                  "--seq or --image-size are given, else none)"}),
    Arg(("--mode",), {"choices": RUN_MODES, "default": "compiled",
                      "help": "how the step runs: eager (op by op), fuse or compiled (one "
                              "program; default)"}),
    Arg(("--remat",), {"choices": REMATS,
                       "help": "activation checkpointing of a training step's blocks: none "
                               "(default), full (recompute each block), dots (keep matmul "
                               "results); with --max-batch, default: each"}),
    Arg(("--optimizer",), {"choices": ("adamw", "sgd"), "default": "adamw",
                           "help": "a training step's optimizer (default adamw)"}),
    Arg(("--max-batch",), {"action": "store_true",
                           "help": "the largest batch that fits in HBM per chip, with each remat "
                                   "choice (for --estimate's task, train by default; needs "
                                   "--seq or --image-size)"}),
    Arg(("--choose",), {"action": "store_true",
                        "help": "which slice to rent: every generation (--generation v5e,v6e "
                                "to limit them), slice up to --max-chips, split and remat that "
                                "fits the step (--estimate's task, train by default), ranked "
                                "by expected time and list price; weights in bfloat16 unless "
                                "--dtype"}),
    Arg(("--widget",), {"action": "store_true",
                        "help": "one slice at a time, with controls (generation, slice, tensor "
                                "parallelism, batch, seq or image size, remat, price) that "
                                "update the HBM bar, the expected time and the list price; "
                                "starts at --generation and --chips (the slice's devices)"}),
    Arg(("--max-chips",), {"type": int, "metavar": "N",
                           "help": "with --choose: the largest slice weighed, with --widget "
                                   "offered (default 256)"}),
    Arg(("--commitment",), {"choices": ("on-demand", "1-year", "3-year", "spot"),
                            "default": "on-demand",
                            "help": "with --choose or --widget: which list price (default "
                                    "on-demand)"}),
    Arg(("--tokens",), {"type": float, "metavar": "T",
                        "help": "with --choose: a whole training run's tokens, to price the run "
                                "(e.g. 15e12)"}),
)  # fmt: skip
def plan(magics, args, cell):
    if args.model in magics.shell.user_ns or not os.path.exists(args.model):
        model = magics.lookup(args.model, "plan")
    else:
        model = args.model  # a path to a saved model or config
    if args.widget:
        _widget(args, model)
        return
    if args.choose:
        _choose(args, model)
        return
    for name in ("max_chips", "tokens"):
        if getattr(args, name) is not None:
            raise error("plan", f"--{name.replace('_', '-')} goes with --choose")
    chips, generation = args.chips, args.generation
    if chips is None or generation is None:
        from .. import session

        with shown_as_usage_errors():
            current_generation, current_chips = session.current_topology()
        generation = generation or current_generation
        chips = chips or current_chips
    step = args.image_size is not None or (args.batch is not None and args.seq is not None)
    if args.max_batch:
        if args.seq is None and args.image_size is None:
            raise error("plan", "--max-batch needs the length of a step: give --seq (or "
                                "--image-size for an image model)")
        if args.estimate == "none":
            raise error("plan", "--max-batch grows the batch of a task: give --estimate "
                                "forward|train|decode, or leave it out (train)")
    task = args.estimate or ("forward" if step else "none")
    if task != "none" and not step and not args.max_batch:
        raise error("plan", f"--estimate {task} needs the work of one step: give --batch and "
                            "--seq (or --image-size for an image model)")
    planning = module("tpu_lab.sharding")
    with shown_as_usage_errors():
        planned = planning.plan(
            model,
            chips=chips,
            generation=generation,
            batch=args.batch,
            seq=args.seq,
            dtype=None if args.dtype is None else getattr(module("torch"), args.dtype),
            image_size=args.image_size,
            frames=args.frames,
            remat=args.remat or "none",
            optimizer=args.optimizer,
        )
        if args.max_batch:
            limits = planned.max_batch(args.estimate or "train", remat=args.remat,
                                       mode=args.mode)
            display(lookup.view(limits))
            return
        estimate = False if task == "none" else planned.estimate(task, mode=args.mode)
        display(module("tpu_lab.views.sharding").view(planned, estimate=estimate))


def _one_step(args, flag: str) -> dict:
    """What ``--choose`` and ``--widget`` (``flag``) both need: one step's size and task,
    checked; returns the options they share (``max_chips``, ``dtype``)."""
    if args.batch is None or (args.seq is None and args.image_size is None):
        raise error("plan", f"--{flag} weighs one step: give --batch and --seq (or "
                            "--image-size for an image model)")
    if args.estimate == "none":
        raise error("plan", f"--{flag} needs a task: --estimate forward|train|decode, or "
                            "leave it out (train)")
    options = {} if args.max_chips is None else {"max_chips": args.max_chips}
    if args.dtype is not None:
        options["dtype"] = getattr(module("torch"), args.dtype)
    return options


def _choose(args, model) -> None:
    """``%tpu plan MODEL --choose``: :func:`tpu_lab.sharding.choose`, drawn."""
    options = _one_step(args, "choose")
    if args.chips is not None or args.max_batch:
        raise error("plan", "--choose weighs every slice and split itself: leave out "
                            f"--{'chips' if args.chips is not None else 'max-batch'} (use "
                            "--max-chips to bound the slices)")
    if args.generation is not None:
        options["generations"] = tuple(
            g.strip() for g in args.generation.split(",") if g.strip())
    with shown_as_usage_errors():
        found = module("tpu_lab.sharding").choose(
            model, args.estimate or "train", batch=args.batch, seq=args.seq,
            image_size=args.image_size, frames=args.frames, remat=args.remat, mode=args.mode,
            commitment=args.commitment, tokens=args.tokens, **options)
    display(lookup.view(found))


def _widget(args, model) -> None:
    """``%tpu plan MODEL --widget``: :class:`tpu_lab.views.slice_widget.SliceWidget`."""
    if args.choose:
        raise error("plan", "--widget shows one slice at a time with controls, --choose ranks "
                            "them all: give one of them")
    options = _one_step(args, "widget")
    for name, given in (("max-batch", args.max_batch), ("tokens", args.tokens is not None),
                        ("optimizer", args.optimizer != "adamw")):
        if given:
            raise error("plan", f"--widget weighs a step as --choose does (AdamW for "
                                f"training): leave out --{name}")
    generation, devices = args.generation, args.chips
    if generation is None:
        from .. import session

        with shown_as_usage_errors():
            generation, current = session.current_topology()
        devices = devices or current
    widgets = module("tpu_lab.views.slice_widget")
    with shown_as_usage_errors():
        display(widgets.SliceWidget(
            model, args.estimate or "train", batch=args.batch, seq=args.seq,
            image_size=args.image_size, frames=args.frames, generation=generation,
            devices=devices, remat=args.remat or "none", commitment=args.commitment,
            mode=args.mode, **options))


@subcommand(
    "cluster",
    "one process per chip: start TOPOLOGY (default: the current one; a pod slice such as v6e-16 "
    "runs its hosts on this machine), connect to an ipyparallel cluster started outside (engines "
    "on one host or several), stop, restart, status",
    Arg(("action",), {"nargs": "?", "default": "status",
                      "choices": ("start", "connect", "stop", "restart", "status")}),
    Arg(("topology",), {"nargs": "?", "metavar": "TOPOLOGY",
                        "help": "for start (or connect), e.g. v6e-4, v6e-16"}, "topology"),
    Arg(("--profile",), {"metavar": "NAME", "help": "for connect: the cluster's ipython profile"}),
    Arg(("--cluster-id",), {"metavar": "ID", "help": "for connect: the cluster's id"}),
    Arg(("--url-file",), {"metavar": "PATH", "help": "for connect: its ipcontroller-client.json"}),
)  # fmt: skip
def cluster(magics, args, cell):
    clusters = module("tpu_lab.launch.cluster")
    if args.topology is not None and args.action not in ("start", "connect"):
        raise error("cluster", f"only start and connect take a topology, not {args.action}")
    where = {"profile": args.profile, "cluster_id": args.cluster_id, "url_file": args.url_file}
    if args.action != "connect" and any(where.values()):
        raise error("cluster", "--profile, --cluster-id and --url-file are for connect")
    with shown_as_usage_errors():
        if args.action == "connect":
            result = module("tpu_lab.launch.connect").connect(**where, topology=args.topology)
        elif args.action == "start":
            topology = args.topology
            if topology is None:
                from ..runtime import backend

                topology = backend().status().topology
            result = clusters.start(topology)
        elif args.action == "stop":
            result = clusters.stop()
        elif args.action == "restart":
            result = clusters.restart()
        else:
            result = clusters.current()
    if result is None:
        print(f"cluster: {args.action} done")
    else:
        display(lookup.view(result))


@subcommand(
    "spmd",
    "run this cell on every rank of the cluster; shows rank 0's output and the sharding",
    line=False,
    cell=True,
)
def spmd(magics, args, cell):
    clusters = module("tpu_lab.launch.cluster")
    with shown_as_usage_errors():
        display(lookup.view(clusters.current().run_cell(cell)))
