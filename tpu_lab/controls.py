"""What a notebook switches: the eager mode by its short name, the simulated topology, and a
fresh start of the record (``reset``). The ``%tpu`` magics call these and nothing else.

Short eager-mode names (``%tpu mode NAME``):

- ``eager``: ``EagerMode.DEFER_NEVER``, op by op (TorchTPU's default).
- ``blocking``: ``EagerMode.DEFER_NEVER_AND_LAUNCH_BLOCKING``, op by op, waiting for each op.
- ``fuse``: ``EagerMode.DEFER_AND_FUSE``, ops recorded until a sync point, then compiled as one
  graph and cached.
- ``compile``: the same ``DEFER_AND_FUSE``. It is TorchTPU's only eager mode that compiles;
  graph mode proper is ``torch.compile(fn, backend="tpu")``, which applies to a function, not
  to a cell, so a whole cell is "compiled" the way TorchTPU compiles eager code.
"""

from __future__ import annotations

import contextlib

from .errors import TpuLabError

#: Short name -> ``torch.tpu.EagerMode`` member name.
MODES = {
    "eager": "DEFER_NEVER",
    "fuse": "DEFER_AND_FUSE",
    "compile": "DEFER_AND_FUSE",
    "blocking": "DEFER_NEVER_AND_LAUNCH_BLOCKING",
}
_SHORT = {"DEFER_NEVER": "eager", "DEFER_AND_FUSE": "fuse",
          "DEFER_NEVER_AND_LAUNCH_BLOCKING": "blocking"}  # fmt: skip


def short_mode_name(mode) -> str:
    """``EagerMode.DEFER_AND_FUSE`` (or its name) -> ``"fuse"``; unknown names unchanged."""
    name = getattr(mode, "name", str(mode))
    return _SHORT.get(name, name)


def eager_mode(name: str):
    """The ``torch.tpu.EagerMode`` for a short name (``fuse``) or a member name."""
    import torch

    key = name.strip()
    member = MODES.get(key.lower(), key.upper())
    if member not in torch.tpu.EagerMode.__members__ or member.startswith("_"):
        raise TpuLabError(
            f"Unknown eager mode {name!r}; use one of {', '.join(MODES)} "
            "(or a torch.tpu.EagerMode name such as DEFER_AND_FUSE)."
        )
    return torch.tpu.EagerMode[member]


def current_mode():
    import torch

    return torch.tpu.eager_mode


def set_mode(name: str) -> tuple[str, str]:
    """Switch the eager mode for the session; returns the old and new member names."""
    import torch

    new = eager_mode(name)
    old = torch.tpu.eager_mode
    torch.tpu.eager_mode = new
    return old.name, new.name


def mode(name: str) -> contextlib.AbstractContextManager:
    """``with controls.mode("fuse"): ...``: the previous mode comes back on exit, also when the
    block raises (``torch.tpu.set_eager_mode``)."""
    import torch

    return torch.tpu.set_eager_mode(eager_mode(name))


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
        current = backend().status().topology
        generation = generation or current.rsplit("-", 1)[0]
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
        f"eager compile cache (DEFER_AND_FUSE): {stats['misses']} compiled graph(s) dropped, "
        f"statistics ({stats['requests']} requests, {stats['hits']} hits) set to 0",
        "torch.compile: compiled graphs dropped (torch._dynamo.reset()): every compiled "
        "function compiles again on its next call; recompile counts per call site set to 0",
        f"event log: {kept} event(s) cleared"
        + (f" ({dropped} older ones had already been dropped)" if dropped else ""),
        "kept: tensors on the device, HBM peak, eager mode, topology",
    ]
