"""Pod slices: TPU topologies that span several hosts, and where each rank of one sits.

A slice is a block of chips joined by ICI (inter-chip interconnect), ICI links crossing the
hosts of the slice too; several slices of a job (Multislice) are joined by DCN, the data-centre
network between hosts. Every host (TPU VM, "worker") of a multi-host slice drives a 2x2x1 block
of chips, and a job runs one process per device, so a host runs 4 ranks (8 on v7, whose chips
have two devices each).

The tables come from the public Cloud TPU pages ("Supported configurations" of
cloud.google.com/tpu/docs/v4, v5e, v5p, v6e and tpu7x: slice topology, chips, VMs) and from
TorchTPU 0.2.0's ``torch_tpu/_internal/distributed/distributed.py``: its per-host chip bounds
(``_CHIPS_PER_HOST = (2, 2, 1)``) and the order of hosts in a slice (host coordinates sorted
Z-major, X-minor, as JAX's ``mesh_utils`` orders devices), from which ``set_tpu_launch_env``
derives ``NODE_RANK``; its launcher example for v7 runs ``TORCH_TPU_TOPOLOGY=4,4,8,2`` with
``WORLD_SIZE=256`` and 8 ranks per host. The one-host topologies are those of
:mod:`.topology` (TorchTPU's ``hardware.py``).

Names count devices, as tpu_lab's one-host names do: ``v6e-16`` is 16 chips on 4 hosts;
``v5p-16`` is 16 chips on 4 hosts, which the Cloud TPU API calls ``v5p-32`` (it counts
TensorCores for v4 and v5p): :attr:`Slice.accelerator_type` keeps the Cloud name. A device
count that exists both on one host and on several takes the host count after a slash:
``v6e-8`` is one host of 8 chips, ``v6e-8/2`` the same 2x4 chips on two hosts of 4 (GKE's
``ct6e-standard-4t`` machines).
"""

from __future__ import annotations

from dataclasses import dataclass

#: Chips (X, Y, Z) each host of a multi-host slice drives (TorchTPU's ``_CHIPS_PER_HOST``).
HOST_BLOCK = (2, 2, 1)

#: Which ICI mesh each generation's slices form.
INTERCONNECT = {
    "v4": "3D torus",
    "v5e": "2D torus",
    "v5p": "3D torus",
    "v6e": "2D torus",
    "v7": "3D torus",
}

# generation -> (chips, chip mesh (X, Y, Z), hosts, Cloud TPU accelerator type) per slice
_MULTI_HOST: dict[str, tuple[tuple[int, tuple[int, int, int], int, str], ...]] = {
    "v4": (
        (8, (2, 2, 2), 2, "v4-16"),
        (16, (2, 2, 4), 4, "v4-32"),
        (32, (2, 4, 4), 8, "v4-64"),
        (64, (4, 4, 4), 16, "v4-128"),
        (128, (4, 4, 8), 32, "v4-256"),
    ),
    "v5p": (
        (8, (2, 2, 2), 2, "v5p-16"),
        (16, (2, 2, 4), 4, "v5p-32"),
        (32, (2, 4, 4), 8, "v5p-64"),
        (64, (4, 4, 4), 16, "v5p-128"),
        (128, (4, 4, 8), 32, "v5p-256"),
    ),
    "v5e": (
        (8, (2, 4, 1), 2, "v5litepod-8"),
        (16, (4, 4, 1), 4, "v5litepod-16"),
        (32, (4, 8, 1), 8, "v5litepod-32"),
        (64, (8, 8, 1), 16, "v5litepod-64"),
        (128, (8, 16, 1), 32, "v5litepod-128"),
        (256, (16, 16, 1), 64, "v5litepod-256"),
    ),
    "v6e": (
        (8, (2, 4, 1), 2, "v6e-8"),
        (16, (4, 4, 1), 4, "v6e-16"),
        (32, (4, 8, 1), 8, "v6e-32"),
        (64, (8, 8, 1), 16, "v6e-64"),
        (128, (8, 16, 1), 32, "v6e-128"),
        (256, (16, 16, 1), 64, "v6e-256"),
    ),
    "v7": (
        (8, (2, 2, 2), 2, "tpu7x-16"),
        (16, (2, 2, 4), 4, "tpu7x-32"),
        (32, (2, 4, 4), 8, "tpu7x-64"),
        (64, (4, 4, 4), 16, "tpu7x-128"),
        (128, (4, 4, 8), 32, "tpu7x-256"),
    ),
}


@dataclass(frozen=True)
class Slice:
    """One slice: its chip mesh, its hosts, and which host and chip each rank drives.

    ``shape`` is the mesh as ``TORCH_TPU_TOPOLOGY`` writes it: chips (X, Y, Z), then the
    devices per chip where a chip has two (v7). Rank ``r`` runs on host ``r //
    devices_per_host``; hosts are numbered in TorchTPU's ``NODE_RANK`` order."""

    generation: str
    devices: int
    hosts: int
    shape: tuple[int, ...]
    host_shape: tuple[int, ...]
    accelerator_type: str
    interconnect: str

    @property
    def devices_per_host(self) -> int:
        return self.devices // self.hosts

    @property
    def chips(self) -> int:
        return _product(self.shape[:3])

    @property
    def host_bounds(self) -> tuple[int, int, int]:
        """Hosts along X, Y, Z (libtpu's ``TPU_HOST_BOUNDS``)."""
        return tuple(s // h for s, h in zip(self.shape[:3], self.host_shape[:3], strict=True))

    def host_of(self, rank: int) -> int:
        return rank // self.devices_per_host

    def ranks_of(self, host: int) -> range:
        start = host * self.devices_per_host
        return range(start, start + self.devices_per_host)

    def host_coords(self, host: int) -> tuple[int, int, int]:
        """Where ``host`` sits among the hosts (TorchTPU's order: Z-major, then Y, X-minor)."""
        bx, by, _ = self.host_bounds
        return (host % bx, host // bx % by, host // (bx * by))

    def chip_coords(self, rank: int) -> tuple[int, ...]:
        """The chip (X, Y, Z) rank ``rank`` drives, and its device on that chip (v7)."""
        per_chip = self.devices // self.chips
        local = rank % self.devices_per_host
        chip, core = divmod(local, per_chip)
        cx, cy, _ = self.host_shape[:3]
        within = (chip % cx, chip // cx % cy, chip // (cx * cy))
        host = self.host_coords(self.host_of(rank))
        coords = tuple(h * c + w for h, c, w in zip(host, self.host_shape[:3], within, strict=True))
        return (*coords, core) if per_chip > 1 else coords

    def link(self, a: int, b: int) -> str:
        """How ranks ``a`` and ``b`` reach each other: ``"host"`` (same host, ICI),
        ``"ici"`` (other host of the slice, still ICI)."""
        return "host" if self.host_of(a) == self.host_of(b) else "ici"

    def describe(self) -> str:
        dims = "x".join(map(str, self.shape[:3]))
        per_chip = self.devices // self.chips
        cores = f", {per_chip} devices per chip" if per_chip > 1 else ""
        where = "one host" if self.hosts == 1 else f"{self.hosts} hosts of {self.devices_per_host}"
        return (
            f"{self.chips} chips ({dims}{cores}) on {where}, {self.interconnect} ICI; "
            f"Cloud TPU type {self.accelerator_type}"
        )


def _product(values) -> int:
    out = 1
    for v in values:
        out *= v
    return out


def multi_host(generation: str) -> dict[tuple[int, int], Slice]:
    """The multi-host slices of ``generation`` by (devices, hosts)."""
    per_chip = 2 if generation == "v7" else 1
    out = {}
    for chips, mesh, hosts, cloud in _MULTI_HOST.get(generation, ()):
        extra = (per_chip,) if per_chip > 1 else ()
        out[(chips * per_chip, hosts)] = Slice(
            generation, chips * per_chip, hosts, (*mesh, *extra), (*HOST_BLOCK, *extra), cloud,
            INTERCONNECT[generation],
        )  # fmt: skip
    return out


def one_host(generation: str, devices: int, shape: tuple[int, ...]) -> Slice:
    """A one-host topology (TorchTPU's ``hardware.py`` table) as a slice of one host."""
    cores = 2 if generation in ("v4", "v5p") else 1  # the Cloud TPU API counts their cores
    prefix = {"v5e": "v5litepod", "v7": "tpu7x"}.get(generation, generation)
    return Slice(
        generation, devices, 1, shape, shape, f"{prefix}-{devices * cores}",
        INTERCONNECT[generation],
    )  # fmt: skip
