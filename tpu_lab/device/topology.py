"""TPU generations and the chip topologies the bundled device can simulate.

The table mirrors TorchTPU's ``_internal/utils/hardware.py``: the topology (mesh shape) for
each supported chip count of one host. HBM per chip and every other published figure come
from the one chip table, :mod:`tpu_lab.estimate.chips`.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from ..errors import TopologyError
from ..estimate.chips import CHIPS, Chip

#: Environment variable read once, at first use, to choose the simulated topology.
TOPOLOGY_ENV = "TPU_LAB_TOPOLOGY"
#: The topology used when neither the API nor ``TPU_LAB_TOPOLOGY`` chose one.
DEFAULT_TOPOLOGY = "v6e-1"


@dataclass(frozen=True)
class Generation:
    """One TPU generation: how its chips are laid out on one host, and (through :attr:`chip`,
    the single table of :mod:`tpu_lab.estimate.chips`) its published figures."""

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
    """A host's worth of TPU devices of one generation, e.g. ``v6e-4``."""

    generation: Generation
    devices: int

    @property
    def name(self) -> str:
        return f"{self.generation.name}-{self.devices}"

    @property
    def shape(self) -> tuple[int, ...]:
        return self.generation.topologies[self.devices]

    @property
    def hbm_per_device(self) -> int:
        return self.generation.hbm_per_device

    def __str__(self) -> str:
        dims = ",".join(map(str, self.shape))
        return f"{self.name} ({self.devices} x {self.generation.display_name}, topology {dims})"


_NAME = re.compile(r"^\s*(?:tpu[\s_-]*)?(v\d+[a-z]?)(?:[-:x ](\d+))?\s*$", re.IGNORECASE)


def _choices() -> str:
    return "; ".join(
        f"{g.name}-{{{','.join(map(str, g.topologies))}}}" for g in GENERATIONS.values()
    )


def make_topology(generation: str, devices: int | None = None) -> Topology:
    """The topology for ``generation`` with ``devices`` devices (default: the smallest)."""
    gen = GENERATIONS.get(str(generation).strip().lower())
    if gen is None:
        raise TopologyError(
            f"Unknown TPU generation {generation!r}. Known generations: "
            f"{', '.join(GENERATIONS)}. Example: 'v6e-4'."
        )
    if devices is None:
        devices = min(gen.topologies)
    if isinstance(devices, bool) or not isinstance(devices, int) or devices not in gen.topologies:
        counts = ", ".join(map(str, gen.topologies))
        raise TopologyError(
            f"TPU {gen.name} has no {devices!r}-device topology on one host; "
            f"choose one of {counts} (for example '{gen.name}-{max(gen.topologies)}')."
        )
    return Topology(gen, devices)


def parse_topology(name: str) -> Topology:
    """Parse ``'v6e-4'``, ``'v5e'``, ``'TPU v4-8'`` into a :class:`Topology`."""
    match = _NAME.match(name) if isinstance(name, str) else None
    if match is None:
        raise TopologyError(
            f"Cannot read the topology {name!r}: expected GENERATION-DEVICES such as "
            f"'v6e-4'. Available: {_choices()}."
        )
    count = match.group(2)
    return make_topology(match.group(1), int(count) if count else None)


def topology_from_env() -> Topology:
    """The topology named by ``TPU_LAB_TOPOLOGY``, or the default ``v6e-1``."""
    value = os.environ.get(TOPOLOGY_ENV, "").strip()
    if not value:
        return parse_topology(DEFAULT_TOPOLOGY)
    try:
        return parse_topology(value)
    except TopologyError as exc:
        raise TopologyError(f"{TOPOLOGY_ENV}={value!r} is not valid. {exc}") from None
