"""TPU generations and the chip topologies the bundled device can simulate.

The table mirrors TorchTPU's ``_internal/utils/hardware.py``: the topology (mesh shape) for
each supported chip count of one host. HBM per chip and every other published figure come
from the one chip table, :mod:`tpu_lab.hardware.chips`. Topologies that span several hosts
(pod slices) come from :mod:`.slices`.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from ..errors import TopologyError
from .chips import CHIPS, Chip

#: Environment variable read once, at first use: the simulated generation and chip count,
#: default ``v6e-1``; ``v4-{1,2,4,8}``, ``v5e-{1,4,8}``, ``v5p-{1,2,4,8}``, ``v6e-{1,4,8}``,
#: ``v7-{2,4,8}`` (also ``tpu_lab.use_topology("v5e-8")`` or ``%tpu use``).
TOPOLOGY_ENV = "TPU_LAB_TOPOLOGY"
#: The topology used when neither the API nor ``TPU_LAB_TOPOLOGY`` chose one.
DEFAULT_TOPOLOGY = "v6e-1"


@dataclass(frozen=True)
class Generation:
    """One TPU generation: how its chips are laid out on one host, and (through :attr:`chip`,
    the single table of :mod:`tpu_lab.hardware.chips`) its published figures."""

    name: str
    topologies: dict[int, tuple[int, ...]] = field(hash=False)
    devices_per_chip: int = 1

    @property
    def chip(self) -> Chip:
        """The chip's published figures (peak rates, HBM, ICI, MXU), with their sources."""
        return CHIPS[self.name]

    @property
    def device(self) -> Chip:
        """What one device is (a plan's or a topology's unit): the chip, or its share of the
        chip where the runtime shows several devices per chip (v7)."""
        return self.chip.per_device(self.devices_per_chip)

    @property
    def hbm_per_device(self) -> int:
        return self.chip.hbm_bytes // self.devices_per_chip

    @property
    def peak_bf16_tflops(self) -> float:
        return self.chip.bf16_flops / 1e12

    @property
    def hbm_gb_per_s(self) -> float:
        return self.chip.hbm_bandwidth / 1e9

    @property
    def display_name(self) -> str:
        return f"TPU {self.name}"


GENERATIONS: dict[str, Generation] = {
    g.name: g
    for g in (
        Generation("v4", {1: (1, 1, 1), 2: (1, 2, 1), 4: (2, 2, 1), 8: (2, 2, 2)}),
        Generation("v5e", {1: (1, 1, 1), 4: (2, 2, 1), 8: (2, 4, 1)}),
        Generation("v5p", {1: (1, 1, 1), 2: (1, 2, 1), 4: (2, 2, 1), 8: (2, 2, 2)}),
        Generation("v6e", {1: (1, 1, 1), 4: (2, 2, 1), 8: (2, 4, 1)}),
        # v7: 192 GiB per chip, two devices per chip; counts are devices.
        Generation("v7", {2: (1, 1, 1, 2), 4: (1, 2, 1, 2), 8: (2, 2, 1, 2)},
                   devices_per_chip=2),
    )
}


@dataclass(frozen=True)
class Topology:
    """TPU devices of one generation on one host (``v6e-4``) or several (``v6e-16``)."""

    generation: Generation
    devices: int
    hosts: int = 1

    @property
    def name(self) -> str:
        ambiguous = self.hosts > 1 and self.devices in self.generation.topologies
        return f"{self.generation.name}-{self.devices}" + (f"/{self.hosts}" if ambiguous else "")

    @property
    def slice(self):
        """The :class:`~.slices.Slice`: hosts, and which host and chip each rank drives."""
        from . import slices

        if self.hosts == 1:
            return slices.one_host(
                self.generation.name, self.devices, self.generation.topologies[self.devices]
            )
        return slices.multi_host(self.generation.name)[(self.devices, self.hosts)]

    @property
    def shape(self) -> tuple[int, ...]:
        return self.slice.shape

    @property
    def hbm_per_device(self) -> int:
        return self.generation.hbm_per_device

    def __str__(self) -> str:
        dims = ",".join(map(str, self.shape))
        hosts = f", {self.hosts} hosts of {self.devices // self.hosts}" if self.hosts > 1 else ""
        return (
            f"{self.name} ({self.devices} x {self.generation.display_name}, topology {dims}"
            f"{hosts})"
        )


_NAME = re.compile(
    r"^\s*(?:tpu[\s_-]*)?(v\d+[a-z]?)(?:[-:x ](\d+)(?:/(\d+))?)?\s*$", re.IGNORECASE
)


def _pods(gen: Generation) -> dict:
    from .slices import multi_host

    return multi_host(gen.name)


def _counts(gen: Generation) -> str:
    pods = ", ".join(Topology(gen, d, h).name for d, h in _pods(gen))
    return f"{','.join(map(str, gen.topologies))}" + (f"; pod slices {pods}" if pods else "")


def _choices() -> str:
    return "; ".join(f"{g.name}-{{{_counts(g)}}}" for g in GENERATIONS.values())


def generation_named(name: str, example: str = "v6e") -> Generation:
    """The generation called ``name``, or a TopologyError that lists the known ones and shows
    ``example`` (what the caller takes: a generation, or a topology such as "v6e-4")."""
    gen = GENERATIONS.get(name)
    if gen is None:
        raise TopologyError(f"Unknown TPU generation {name!r}. Known generations: "
                            f"{', '.join(GENERATIONS)}. Example: {example!r}.")
    return gen


def make_topology(
    generation: str, devices: int | None = None, hosts: int | None = None
) -> Topology:
    """The topology for ``generation`` with ``devices`` devices (default: the smallest) on
    ``hosts`` hosts (default: one host where it has that many devices, else its pod slice)."""
    gen = generation_named(str(generation).strip().lower(), example="v6e-4")
    if devices is None:
        devices = min(gen.topologies)
    pods = _pods(gen)
    if hosts is None:
        hosts = 1 if devices in gen.topologies else next(
            (h for d, h in pods if d == devices), 1)  # fmt: skip
    valid = isinstance(devices, int) and not isinstance(devices, bool)
    if not valid or not (
        (hosts == 1 and devices in gen.topologies) or (devices, hosts) in pods
    ):
        on = "one host" if hosts == 1 else f"{hosts} hosts"
        pods = ", ".join(Topology(gen, d, h).name for d, h in pods)
        raise TopologyError(
            f"TPU {gen.name} has no {devices!r}-device topology on {on}; choose one of "
            f"{', '.join(map(str, gen.topologies))} (for example '{gen.name}-"
            f"{max(gen.topologies)}')" + (f", or a pod slice: {pods}." if pods else ".")
        )
    return Topology(gen, devices, hosts)


def parse_topology(name: str) -> Topology:
    """Parse ``'v6e-4'``, ``'v5e'``, ``'TPU v4-8'`` into a :class:`Topology`."""
    match = _NAME.match(name) if isinstance(name, str) else None
    if match is None:
        raise TopologyError(
            f"Cannot read the topology {name!r}: expected GENERATION-DEVICES such as "
            f"'v6e-4'. Available: {_choices()}."
        )
    count, hosts = match.group(2), match.group(3)
    return make_topology(
        match.group(1), int(count) if count else None, int(hosts) if hosts else None
    )


def topology_from_env() -> Topology:
    """The topology named by ``TPU_LAB_TOPOLOGY``, or the default ``v6e-1``."""
    value = os.environ.get(TOPOLOGY_ENV, "").strip()
    if not value:
        return parse_topology(DEFAULT_TOPOLOGY)
    try:
        return parse_topology(value)
    except TopologyError as exc:
        raise TopologyError(f"{TOPOLOGY_ENV}={value!r} is not valid. {exc}") from None
