"""The TPU hardware as published: one table of the chips' figures, each with its source
(:mod:`.chips`), the generations and the chip topologies of one host (:mod:`.topology`, from
TorchTPU's own hardware table), the pod slices that span several hosts (:mod:`.slices`), and
the list prices of a chip-hour (:mod:`.prices`).

Plain data at the bottom of the layers: the cost engine reads the chips' figures, the bundled
device simulates the topologies, plans and the slice chooser read both; this package imports
nothing of tpu_lab's but its errors.
"""

from __future__ import annotations

from .chips import CHIPS, Chip
from .topology import (
    DEFAULT_TOPOLOGY,
    GENERATIONS,
    TOPOLOGY_ENV,
    Generation,
    Topology,
    make_topology,
    parse_topology,
)

__all__ = [
    "CHIPS",
    "DEFAULT_TOPOLOGY",
    "GENERATIONS",
    "TOPOLOGY_ENV",
    "Chip",
    "Generation",
    "Topology",
    "make_topology",
    "parse_topology",
]
