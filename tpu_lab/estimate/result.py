"""What an estimate says: :class:`Estimate` and the per-op :class:`OpCost` behind it (plain
frozen data; :mod:`tpu_lab.views.estimate` draws them)."""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from dataclasses import dataclass

from .._drawn import Drawn
from ..hardware.chips import Chip
from ..hardware.prices import price
from ..units import format_bytes
from .memory import Memory

#: How every estimate is labelled wherever it is shown.
LABEL = "estimate of an idealised chip"

BOUNDS = ("compute", "memory", "collective", "launch")
#: The fields of an :class:`OpCost` that add up over ops.
SUMMED = ("flops", "padded_flops", "hbm_bytes", "ici_bytes", "dcn_bytes", "compute_seconds",
          "memory_seconds", "collective_seconds", "busy_seconds", "launch_seconds")


@dataclass(frozen=True)
class OpCost:
    """The cost of ``count`` ops (or fused groups, or collectives) of one kind on one chip.
    ``busy_seconds`` sums, op by op, the larger of compute, memory and collective time (the
    idealised chip overlaps them within an op); ``seconds`` adds the launches."""

    name: str
    kind: str  # "matmul" (on the MXU), "vector", "fusion", "collective", "launch"
    count: int
    flops: float
    padded_flops: float
    hbm_bytes: float
    ici_bytes: float
    dcn_bytes: float
    compute_seconds: float
    memory_seconds: float
    collective_seconds: float
    busy_seconds: float
    launch_seconds: float
    shapes: str = ""

    @classmethod
    def of(cls, name: str, kind: str, *, bandwidth: float, flops: float = 0.0,
           padded_flops: float = 0.0, hbm_bytes: float = 0.0, compute_seconds: float = 0.0,
           launch_seconds: float = 0.0, shapes: str = "", ici_bytes: float = 0.0,
           dcn_bytes: float = 0.0, collective_seconds: float = 0.0) -> OpCost:
        """One op: its memory time is ``hbm_bytes`` at ``bandwidth``, and it is busy for the
        largest of its compute, memory and collective times (an idealised chip overlaps them)."""
        memory = hbm_bytes / bandwidth
        return cls(name, kind, 1, flops, padded_flops, hbm_bytes, ici_bytes, dcn_bytes,
                   compute_seconds, memory, collective_seconds,
                   max(compute_seconds, memory, collective_seconds), launch_seconds, shapes)

    def times(self, n: int) -> OpCost:
        """``n`` runs of this op."""
        if n == 1:
            return self
        return dataclasses.replace(self, count=self.count * n,
                                   **{f: getattr(self, f) * n for f in SUMMED})

    @property
    def seconds(self) -> float:
        return self.busy_seconds + self.launch_seconds

    @property
    def bound(self) -> str:
        if self.launch_seconds > self.busy_seconds:
            return "launch"
        terms = {"compute": self.compute_seconds, "memory": self.memory_seconds,
                 "collective": self.collective_seconds}
        return max(terms, key=terms.get)

    @property
    def intensity(self) -> float | None:
        """FLOPs per HBM byte (None without HBM traffic)."""
        return self.flops / self.hbm_bytes if self.hbm_bytes else None


@dataclass(frozen=True)
class Estimate(Drawn):
    """The estimated time of a program (an op, a graph, a model's step) on one chip of a
    ``chips``-chip ``chip`` system: an estimate of an idealised chip, never a measurement.

    Per-chip quantities: ``flops`` (PyTorch's counter), ``padded_flops`` (matmul dims rounded
    up to the MXU's tiles), ``hbm_bytes``, ``ici_bytes`` and ``dcn_bytes`` (what the chip
    sends). ``compute_seconds``, ``memory_seconds`` and ``collective_seconds`` are the sums of
    those terms over the ops; ``seconds`` is how they combine (see
    :mod:`tpu_lab.estimate.graph`); ``bound`` says which term the time goes to. ``items``
    ``unit`` (e.g. 8192 "tokens") is what one run produces, for :attr:`throughput`."""

    title: str
    chip: Chip
    chips: int
    mode: str
    seconds: float
    flops: float
    padded_flops: float
    hbm_bytes: float
    ici_bytes: float
    dcn_bytes: float
    compute_seconds: float
    memory_seconds: float
    collective_seconds: float
    launch_seconds: float
    bound: str
    ops: tuple[OpCost, ...]
    items: float = 0.0
    unit: str = ""
    notes: tuple[str, ...] = ()
    memory: Memory | None = None
    task: str = ""  # a model's step: "forward", "train" or "decode" ("" for other programs)
    #: The time a real run is expected to take
    #: (:func:`tpu_lab.estimate.graph.expected_seconds`): ``seconds`` is the idealised bound,
    #: which no run beats.
    expected_seconds: float = 0.0

    label = LABEL

    def usd_per_step(self, commitment: str = "on-demand") -> float | None:
        """The list price of one run on all the estimate's chips at the expected time
        (:mod:`tpu_lab.hardware.prices`; a device of a chip that shows two is half a chip);
        ``None`` where no price of the generation and commitment is published."""
        p = price(self.chip.generation, commitment)
        if not p.known:
            return None
        chip_hours = self.expected_seconds / 3600 * self.chips / self.chip.devices_per_chip
        return chip_hours * p.usd_per_chip_hour

    def usd_per(self, items: float, commitment: str = "on-demand") -> float | None:
        """The list price of making ``items`` of the estimate's unit (``1e6`` tokens, one
        image, a training run's tokens) at this run's rate; ``None`` without a price or
        without items."""
        step = self.usd_per_step(commitment)
        if step is None or not self.items:
            return None
        return step * items / self.items

    @property
    def expected_throughput(self) -> float | None:
        """``items`` per second at the expected time (all chips together)."""
        return self.items / self.expected_seconds if self.items and self.expected_seconds else None

    @property
    def peak_hbm_bytes(self) -> float | None:
        """The most HBM one chip holds while the program runs (an estimate: see
        :mod:`tpu_lab.estimate.memory`); None where the program was not recorded running."""
        return None if self.memory is None else self.memory.peak_bytes

    @property
    def hbm_capacity(self) -> int:
        """One chip's HBM (one device's, where a chip shows as two)."""
        return self.chip.hbm_bytes

    @property
    def fits(self) -> bool | None:
        """Whether the peak fits in one chip's HBM; None without a peak."""
        return None if self.memory is None else self.memory.peak_bytes <= self.hbm_capacity

    @property
    def verdict(self) -> str:
        """``'fits in HBM: peak 3.21 GiB of 32.00 GiB per chip (estimate, compiled)'``."""
        if self.memory is None:
            return ""
        fits = "fits in HBM" if self.fits else "does NOT fit in HBM"
        return (f"{fits}: peak {format_bytes(int(self.memory.peak_bytes))} of "
                f"{format_bytes(self.hbm_capacity)} per chip (estimate, {self.memory.mode})")

    @property
    def idealised_chip(self) -> str:
        """What it is an estimate on: ``'an idealised TPU v6e chip'`` (one of a v7 chip's two
        devices: ``'an idealised TPU v7 device'``)."""
        name, per, _ = self.chip.name.partition("/")
        return f"an idealised TPU {name} {'device' if per else 'chip'}"

    @property
    def mxu_utilisation(self) -> float:
        """Share of the chip's peak bf16 FLOP/s this time implies."""
        return self.flops / (self.seconds * self.chip.bf16_flops) if self.seconds else 0.0

    @property
    def padding_waste(self) -> float:
        """Share of the MXU's work spent on padding."""
        return 1 - self.flops / self.padded_flops if self.padded_flops else 0.0

    @property
    def intensity(self) -> float | None:
        return self.flops / self.hbm_bytes if self.hbm_bytes else None

    @property
    def throughput(self) -> float | None:
        """``items`` per second (all chips together), None without items."""
        return self.items / self.seconds if self.items and self.seconds else None

    def top(self, n: int = 5) -> tuple[OpCost, ...]:
        """The ``n`` ops that take the most time."""
        return tuple(sorted(self.ops, key=lambda o: -o.seconds)[:n])


def merged(costs: list[OpCost]) -> tuple[OpCost, ...]:
    """Costs of the same name and shapes added up, the most expensive first."""
    groups: dict[tuple[str, str], list[OpCost]] = defaultdict(list)
    for c in costs:
        groups[(c.name, c.shapes)].append(c)
    out = [OpCost(name, cs[0].kind, sum(c.count for c in cs),
                  *(sum(getattr(c, f) for c in cs) for f in SUMMED), shapes)
           for (name, shapes), cs in groups.items()]
    return tuple(sorted(out, key=lambda c: -c.seconds))
