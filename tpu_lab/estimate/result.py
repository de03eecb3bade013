"""What an estimate says: :class:`Estimate` and the per-op :class:`OpCost` behind it (plain
frozen data; :mod:`tpu_lab.views.estimate` draws them)."""

from __future__ import annotations

from dataclasses import dataclass

from .chips import Chip

#: How every estimate is labelled wherever it is shown.
LABEL = "estimate of an idealised chip"

BOUNDS = ("compute", "memory", "collective", "launch")


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
class Estimate:
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
    verdict: str = ""

    label = LABEL

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
