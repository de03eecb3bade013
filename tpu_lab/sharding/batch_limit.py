"""How far can a plan go: the largest global batch whose step fits in each chip's HBM.

For each activation-checkpointing choice (:mod:`.remat`), the step is estimated at a batch,
and its peak HBM per chip (:mod:`tpu_lab.estimate.memory`) compared with the chip's: one
recording per batch tried. A step's peak grows with the batch almost in a straight line
(weights, gradients and optimizer state stay; activations and temporaries grow), so the
search measures the peak at the smallest batch and at twice it, aims where that line meets
the chip's HBM, and then steps from there to the exact limit, recording each batch it tries.
The batch moves in multiples of the plan's replicas (``data * fsdp``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..errors import ShardingError
from ..estimate.result import Estimate
from .remat import POLICIES, check


@dataclass(frozen=True)
class BatchLimit:
    """The largest global ``batch`` that fits with ``remat`` (0: not even the smallest), the
    step's estimate at it (``estimate.memory``: what fills HBM there) or, when none fits, at
    the smallest batch; ``tried``: the batches recorded to find it."""

    remat: str
    batch: int
    estimate: Estimate
    tried: tuple[int, ...]
    at_limit: bool = False  # the search stopped at its limit: the batch may go higher

    @property
    def fits(self) -> bool:
        return self.batch > 0

    @property
    def estimate_batch(self) -> int:
        """The global batch of :attr:`estimate`."""
        return self.batch or self.tried[0]


@dataclass(frozen=True)
class BatchLimits:
    """:class:`BatchLimit` s of one plan's ``task`` in ``mode``, one per remat choice."""

    title: str
    task: str
    mode: str
    capacity: int
    rows: tuple[BatchLimit, ...]


def _fits(e: Estimate) -> bool:
    return e.peak_hbm_bytes <= e.hbm_capacity


def _search(plan, task: str, remat: str, mode: str, limit: int) -> BatchLimit:
    unit = plan.data * plan.fsdp
    found: dict[int, Estimate] = {}

    def at(batch: int) -> Estimate:
        if batch not in found:
            step = dataclasses.replace(plan, batch=batch)
            found[batch] = step.estimate(task, mode=mode, remat=remat)
        return found[batch]

    def done(batch: int) -> BatchLimit:
        shown = at(batch) if batch else at(unit)
        return BatchLimit(remat, batch, shown, tuple(sorted(found)), batch >= limit)

    if not _fits(at(unit)):
        return done(0)
    if 2 * unit > limit or not _fits(at(2 * unit)):
        return done(unit)
    low, high = at(unit).peak_hbm_bytes, at(2 * unit).peak_hbm_bytes
    slope = (high - low) / unit
    aim = limit if slope <= 0 else int(unit + (at(unit).hbm_capacity - low) / slope)
    batch = max(2 * unit, min(limit, aim // unit * unit))
    while batch > 2 * unit and not _fits(at(batch)):
        batch -= unit
    while batch + unit <= limit and _fits(at(batch + unit)):
        batch += unit
    return done(batch)


def max_batch(plan, task: str = "train", *, remat: str | tuple[str, ...] | None = None,
              mode: str = "compiled", limit: int = 1 << 16) -> BatchLimits:
    """The :class:`BatchLimits` of ``plan`` for ``task`` run in ``mode``: one row per
    ``remat`` choice (default: all of them for "train", "none" otherwise), the batch capped at
    ``limit``."""
    if plan.seq is None:
        raise ShardingError("max_batch needs the length of one sequence: plan with seq= (or "
                            "image_size= for an image model), e.g. plan(config, chips=8, "
                            "seq=8192).")
    choices = (POLICIES if task == "train" else ("none",)) if remat is None else (
        (remat,) if isinstance(remat, str) else tuple(remat))
    for choice in choices:
        check(choice)
    if task != "train" and choices != ("none",):
        raise ShardingError(f"remat checkpoints a training step's activations; {task!r} "
                            "keeps none for a backward: leave remat out.")
    rows = tuple(_search(plan, task, choice, mode, limit) for choice in choices)
    return BatchLimits(_title(plan, task), task, mode, plan.hbm_per_chip, rows)


def _title(plan, task: str) -> str:
    what = (f"image {plan.image_size[0]}x{plan.image_size[1]}" if plan.image_size else
            f"seq {plan.seq}")
    return (f"{plan.model} {task}, {what}, on {plan.total_chips} x "
            f"{plan.generation.device.product}")
