"""What a notebook switches: the way code runs (:data:`MODES`), the simulated topology, and a
fresh start of the record (``reset``). The ``%tpu`` magics, the dashboard's toggle and the demo
apps call these and nothing else.

The modes, one table for every front end (``value`` is what ``%tpu mode``, the dashboard and
the demos' API take, ``label`` what their buttons say):

- ``eager``: op by op, as written (``EagerMode.DEFER_NEVER``, TorchTPU's default).
- ``fuse``: ``EagerMode.DEFER_AND_FUSE``, TorchTPU's eager compile cache: ops are recorded until
  a sync point, then compiled as one graph and cached.
- ``blocking``: ``EagerMode.DEFER_NEVER_AND_LAUNCH_BLOCKING``, op by op, waiting for each one.
- ``compiled``: the model under ``torch.compile(backend="tpu")``. Not an eager mode: it applies
  to a function or model (the demos compile theirs), never to a session or a cell.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from .errors import TpuLabError


@dataclass(frozen=True)
class Mode:
    """One way to run code on "tpu": ``eager_mode`` is the ``torch.tpu.EagerMode`` member it
    sets, ``None`` for ``compiled`` (``torch.compile``, which a session cannot switch to)."""

    value: str
    label: str
    meaning: str
    eager_mode: str | None
    #: What the eager compile cache's counters count in this mode.
    cache: str


_OP_PROGRAMS = (
    "each op runs as its own small compiled program, looked up in the eager compile cache by "
    "op, shapes and dtypes: a hit reuses it, a miss compiles it (once per new shape), so the "
    "cache counts ops even though no graph of yours is compiled"
)
EAGER = Mode(
    "eager", "Eager", "op by op, as written (DEFER_NEVER, TorchTPU's default)", "DEFER_NEVER",
    _OP_PROGRAMS,
)
FUSE = Mode(
    "fuse",
    "DEFER_AND_FUSE",
    "eager ops recorded until a sync point, then compiled as one graph and cached "
    "(DEFER_AND_FUSE, TorchTPU's eager compile cache)",
    "DEFER_AND_FUSE",
    "the ops between two sync points are one graph, looked up in the eager compile cache by "
    "its ops, shapes, dtypes and Python scalars: a hit reuses the compiled graph, a miss "
    "compiles it",
)
BLOCKING = Mode(
    "blocking",
    "Blocking",
    "op by op, waiting for each op to finish: for debugging (DEFER_NEVER_AND_LAUNCH_BLOCKING)",
    "DEFER_NEVER_AND_LAUNCH_BLOCKING",
    _OP_PROGRAMS,
)
COMPILED = Mode(
    "compiled",
    "Compiled",
    'the model under torch.compile(backend="tpu"): a graph per input shape, compiled on first '
    "use and reused",
    None,
    "torch.compile's graphs are not in the eager compile cache: they show as compiles and "
    "recompiles",
)
#: Every mode, in the order front ends offer them.
MODES = (EAGER, FUSE, BLOCKING, COMPILED)
#: The modes a session (``%tpu mode``, the dashboard's toggle) switches between.
EAGER_MODES = tuple(m for m in MODES if m.eager_mode is not None)


def cache_note(eager_mode) -> str:
    """What the eager compile cache counts under ``eager_mode`` (a ``torch.tpu.EagerMode`` or
    its name), and what a launch costs in tpu_lab's estimates: the sentence the dashboard, the
    demos and the notebooks put beside the cache's counters."""
    from .estimate import assumptions

    mode = mode_of(eager_mode) or EAGER
    a = assumptions()
    return (f"{mode.eager_mode}: {mode.cache}. Each program launch costs time: the estimates "
            f"count {a.eager_launch_seconds * 1e6:g} µs per eager op and "
            f"{a.graph_launch_seconds * 1e6:g} µs per compiled graph.")


def find_mode(value: str, offered: tuple[Mode, ...] = MODES) -> Mode:
    """The mode of ``offered`` whose value is ``value``, or a :class:`TpuLabError` naming them."""
    for m in offered:
        if m.value == value:
            return m
    raise TpuLabError(
        f"mode must be one of {', '.join(m.value for m in offered)}; got {value!r}."
    )


def mode_of(eager_mode) -> Mode | None:
    """The mode that sets ``eager_mode`` (a ``torch.tpu.EagerMode`` or its name), if any."""
    name = getattr(eager_mode, "name", str(eager_mode))
    return next((m for m in EAGER_MODES if m.eager_mode == name), None)


def eager_mode(name: str):
    """The ``torch.tpu.EagerMode`` for a mode's value (``fuse``) or a member name."""
    import torch

    key = name.strip()
    member = next((m.eager_mode for m in EAGER_MODES if m.value == key.lower()), key.upper())
    if member not in torch.tpu.EagerMode.__members__ or member.startswith("_"):
        raise TpuLabError(
            f"Unknown eager mode {name!r}; use one of "
            f"{', '.join(m.value for m in EAGER_MODES)}, or a torch.tpu.EagerMode name: "
            f"{', '.join(m.eager_mode for m in EAGER_MODES)}."
        )
    return torch.tpu.EagerMode[member]


def current_mode():
    import torch

    return torch.tpu.eager_mode


def set_mode(name: str) -> tuple[str, str]:
    """Switch the eager mode for the session; returns the old and new member names."""
    from .runtime import backend

    new = eager_mode(name)
    old = current_mode()
    backend().set_eager_mode(new)
    return old.name, new.name


def mode(name: str) -> contextlib.AbstractContextManager:
    """``with session.mode("fuse"): ...``: the previous mode comes back on exit, also when the
    block raises."""
    from .runtime import backend

    return backend().eager_mode(eager_mode(name))


def running(value: str, offered: tuple[Mode, ...] = MODES) -> contextlib.AbstractContextManager:
    """The block in mode ``value`` of ``offered``: its eager mode, or the session's as it is
    for ``compiled`` (whoever runs the block compiles the model)."""
    chosen = find_mode(value, offered)
    return contextlib.nullcontext() if chosen.eager_mode is None else mode(chosen.value)


def current_topology() -> tuple[str, int]:
    """(generation, chips) of the topology this process runs on."""
    from .runtime import backend

    status = backend().status()
    return status.topology.rsplit("-", 1)[0], status.chips


def use(
    topology: str | None = None, *, generation: str | None = None, chips: int | None = None
) -> str:
    """Simulate ``topology`` (``"v6e-4"``), or ``generation``/``chips`` (the missing one is taken
    from the current topology); refused on a real TPU. Returns the topology's description."""
    from .runtime import backend

    if topology is not None and (generation is not None or chips is not None):
        raise TpuLabError(
            f"Give either a topology name ({topology!r}) or --generation/--chips, not both."
        )
    if topology is None:
        if generation is None and chips is None:
            raise TpuLabError(
                "Name a topology, for example 'v6e-4', or give --generation and/or --chips."
            )
        generation = generation or current_topology()[0]
        topology = generation if chips is None else f"{generation}-{chips}"
    return backend().use_topology(topology)


def reset() -> list[str]:
    """Start the record afresh: the eager compile cache and its statistics, torch.compile's
    compiled graphs and recompile counts, and the event log. Returns what was reset."""
    import torch

    from . import events
    from .runtime import backend

    stats = backend().cache_stats()
    torch.tpu._clear_cache()
    torch._dynamo.reset()
    kept, dropped = events.reset()
    return [
        f"eager compile cache (DEFER_AND_FUSE's graphs, DEFER_NEVER's ops): {stats['misses']} "
        f"compilation(s) dropped, statistics ({stats['requests']} requests, {stats['hits']} "
        "hits) set to 0",
        "torch.compile: compiled graphs dropped (torch._dynamo.reset()): every compiled "
        "function compiles again on its next call; recompile counts per call site set to 0",
        f"event log: {kept} event(s) cleared"
        + (f" ({dropped} older ones had already been dropped)" if dropped else ""),
        "kept: tensors on the device, HBM peak, eager mode, topology",
    ]
