"""The TPU chips' published figures: one table, each figure with its public source.

Every figure is per chip (a v4, v5p or v7 chip holds two TensorCores; the runtime may show them
as one device, v4/v5p "megacore", or as two, v7). Rates are peaks: what no real program beats.
Units are plain SI: FLOP/s, bytes, bytes/s; ``GiB`` where a source says GiB.

Sources (the keys of :data:`SOURCES`), as read for this table:

- ``v4-docs``: Cloud TPU "TPU v4" (https://cloud.google.com/tpu/docs/v4): "Each TPU v4 chip
  contains two TensorCores. Each TensorCore has four matrix-multiply units (MXUs)"; "Peak
  compute per chip 275 teraflops (bf16 or int8)"; "HBM2 capacity and bandwidth 32 GiB,
  1200 GBps"; "3D mesh".
- ``v5e-docs``: Cloud TPU "TPU v5e" (https://cloud.google.com/tpu/docs/v5e): one TensorCore
  with four MXUs per chip; 197 TFLOPs bf16, 393 TOPs int8; "HBM2 capacity and bandwidth 16 GB,
  819 GBps"; "Bidirectional inter-chip interconnect (ICI) bandwidth (per chip) 400 GBps";
  "ICI ports per chip 4"; "Chips per host 8"; "Per-host NIC configuration 2 x 100 Gbps NIC".
- ``v5p-docs``: Cloud TPU "TPU v5p" (https://cloud.google.com/tpu/docs/v5p): four MXUs per
  TensorCore, two TensorCores per chip; 459 TFLOPs bf16 and fp8; 95 GiB; 2765 GBps;
  bidirectional ICI 1200 GBps per chip; 3D torus; DCN 50 Gbps per chip.
- ``v6e-docs``: Cloud TPU "TPU v6e" (https://cloud.google.com/tpu/docs/v6e): "Each v6e chip
  contains one TensorCore ... two 256x256 matrix-multiply units (MXU)"; 918 TFLOPs bf16,
  1836 TOPs int8; 32 GB; 1638 GBps; bidirectional ICI 800 GBps per chip; 4 ICI ports.
- ``tpu7x-docs``: Cloud TPU "TPU7x (Ironwood)" (https://cloud.google.com/tpu/docs/tpu7x), its
  table against v5p and v6e: 2307 TFLOPs bf16, 4614 fp8; 192 GiB; 7380 GBps; two TensorCores;
  bidirectional ICI 1200 GBps per chip; DCN 100 Gbps per chip (v6e: 100, v5p: 50).
- ``scaling-book``: "How to Scale Your Model", chapter "How to Think About TPUs"
  (jax-ml/scaling-book ``tpus.md``): the table "ICI BW/link (one-way)", 4.5e10 bytes/s for
  TPU v4p; "TPU v4 and TPU v5p are connected to the nearest 6 neighbors (forming a 3D torus)";
  MXUs are 128x128 before v6e; int8 9.18e14 for v5p; DCN "around 2.5e10 bytes / second per
  host" in its first edition (a v4 host holds 4 chips).
- ``jax-tpu-info``: JAX's ``jax/_src/tpu_info.py`` (jax-ml/jax), the per-TensorCore table
  Pallas reads: ``mxu_column_size`` 128 before generation 6 and 256 from it, ``num_mxus`` 2
  on v6e and on TPU7x, two TensorCores per TPU7x chip.
- ``reasoning``: TPU7x's link count, which no source states (see :data:`SOURCES`).

Where sources differ (v5e's bandwidth appears as 819 GB/s and as 800 GiB/s; the scaling book
takes 9e10 bytes/s one way per v5p link where the docs' 1200 GB/s over 6 links gives 1e11),
the table uses the Cloud TPU documentation's figure, the higher one: an estimate of an
idealised chip must never be slower than the hardware allows.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

GiB = 1 << 30
GB = 10**9

SOURCES: dict[str, str] = {
    "v4-docs": "https://cloud.google.com/tpu/docs/v4",
    "v5e-docs": "https://cloud.google.com/tpu/docs/v5e",
    "v5p-docs": "https://cloud.google.com/tpu/docs/v5p",
    "v6e-docs": "https://cloud.google.com/tpu/docs/v6e",
    "tpu7x-docs": "https://cloud.google.com/tpu/docs/tpu7x",
    "scaling-book": "https://jax-ml.github.io/scaling-book/tpus/ (jax-ml/scaling-book tpus.md)",
    "jax-tpu-info": "jax-ml/jax jax/_src/tpu_info.py",
    "reasoning": "no published figure: 6 links of a 3D torus, as v5p, whose pod TPU7x shares "
                  "(tpu7x-docs: 'shares many similarities with TPU v5p'); the links only split "
                  "the published per-chip ICI figure",
}


@dataclass(frozen=True)
class Chip:
    """One TPU chip's published figures (per chip, peak); ``sources`` names, per field, the
    key of :data:`SOURCES` it was read from."""

    name: str
    product: str
    bf16_flops: float
    hbm_bytes: int
    hbm_bandwidth: float
    ici_bidirectional: float  # bytes/s per chip, all links, both directions
    ici_links: int
    dcn_bandwidth: float  # bytes/s per chip, one way, to the data-center network
    mxu: int  # the MXU's side: matmul tiles are mxu x mxu
    mxus_per_core: int
    tensorcores: int
    pod_chips: int  # chips one ICI network joins (a pod); beyond it, the data-center network
    int8_ops: float | None = None
    fp8_flops: float | None = None
    sources: dict[str, str] = field(default_factory=dict, hash=False, compare=False)

    @property
    def ici_link_bandwidth(self) -> float:
        """Bytes/s one way over one ICI link."""
        return self.ici_bidirectional / self.ici_links / 2

    @property
    def ici_bandwidth(self) -> float:
        """Bytes/s a chip can receive over all its ICI links at once (one way)."""
        return self.ici_bidirectional / 2

    @property
    def mxus(self) -> int:
        return self.mxus_per_core * self.tensorcores

    @property
    def critical_intensity(self) -> float:
        """FLOPs per HBM byte at which a bf16 matmul turns compute-bound (peak / bandwidth)."""
        return self.bf16_flops / self.hbm_bandwidth

    @property
    def generation(self) -> str:
        """``'v6e'``; a device of a chip that shows several (``'v7/2'``) names its chip's."""
        return self.name.partition("/")[0]

    @property
    def devices_per_chip(self) -> int:
        """How many devices share the chip this one belongs to (2 for a TPU7x device)."""
        return int(self.name.partition("/")[2] or 1)

    def per_device(self, devices: int) -> Chip:
        """One of ``devices`` equal devices the runtime shows per chip (TPU7x shows two): every
        rate, capacity and count divided between them."""
        if devices == 1:
            return self
        div = dataclasses.replace
        return div(self, name=f"{self.name}/{devices}",
                   product=f"{self.product} (1 of {devices} devices per chip)",
                   bf16_flops=self.bf16_flops / devices, hbm_bytes=self.hbm_bytes // devices,
                   hbm_bandwidth=self.hbm_bandwidth / devices,
                   ici_bidirectional=self.ici_bidirectional / devices,
                   dcn_bandwidth=self.dcn_bandwidth / devices,
                   tensorcores=max(self.tensorcores // devices, 1),
                   pod_chips=self.pod_chips * devices,
                   int8_ops=self.int8_ops and self.int8_ops / devices,
                   fp8_flops=self.fp8_flops and self.fp8_flops / devices)

    def peak_flops(self, kind: str = "bf16") -> float:
        """The MXU's peak for ``kind`` ("bf16", "int8", "fp8"); a kind without a published
        rate runs at the bf16 rate."""
        rate = {"bf16": self.bf16_flops, "int8": self.int8_ops, "fp8": self.fp8_flops}[kind]
        return rate or self.bf16_flops


CHIPS: dict[str, Chip] = {
    c.name: c
    for c in (
        Chip(
            "v4", "TPU v4", bf16_flops=275e12, int8_ops=275e12, hbm_bytes=32 * GiB,
            hbm_bandwidth=1200 * GB, ici_bidirectional=6 * 2 * 4.5e10, ici_links=6,
            dcn_bandwidth=2.5e10 / 4, mxu=128, mxus_per_core=4, tensorcores=2,
            pod_chips=4096,
            sources={"pod_chips": "v4-docs", "bf16_flops": "v4-docs", "int8_ops": "v4-docs",
                     "hbm_bytes": "v4-docs",
                     "hbm_bandwidth": "v4-docs", "ici_bidirectional": "scaling-book",
                     "ici_links": "scaling-book", "dcn_bandwidth": "scaling-book",
                     "mxu": "scaling-book", "mxus_per_core": "v4-docs",
                     "tensorcores": "v4-docs"},
        ),
        Chip(
            "v5e", "TPU v5e", bf16_flops=197e12, int8_ops=393e12, hbm_bytes=16 * GiB,
            hbm_bandwidth=819 * GB, ici_bidirectional=400 * GB, ici_links=4,
            dcn_bandwidth=2 * 100e9 / 8 / 8, mxu=128, mxus_per_core=4, tensorcores=1,
            pod_chips=256,
            sources={"pod_chips": "v5e-docs", "bf16_flops": "v5e-docs", "int8_ops": "v5e-docs",
                     "hbm_bytes": "v5e-docs",
                     "hbm_bandwidth": "v5e-docs", "ici_bidirectional": "v5e-docs",
                     "ici_links": "v5e-docs", "dcn_bandwidth": "v5e-docs",
                     "mxu": "scaling-book", "mxus_per_core": "v5e-docs",
                     "tensorcores": "v5e-docs"},
        ),
        Chip(
            "v5p", "TPU v5p", bf16_flops=459e12, int8_ops=918e12, fp8_flops=459e12,
            hbm_bytes=95 * GiB, hbm_bandwidth=2765 * GB, ici_bidirectional=1200 * GB,
            ici_links=6, dcn_bandwidth=50e9 / 8, mxu=128, mxus_per_core=4, tensorcores=2,
            pod_chips=8960,
            sources={"pod_chips": "v5p-docs", "bf16_flops": "v5p-docs", "int8_ops": "scaling-book",
                     "fp8_flops": "v5p-docs", "hbm_bytes": "v5p-docs",
                     "hbm_bandwidth": "v5p-docs", "ici_bidirectional": "v5p-docs",
                     "ici_links": "scaling-book", "dcn_bandwidth": "v5p-docs",
                     "mxu": "scaling-book", "mxus_per_core": "v5p-docs",
                     "tensorcores": "v5p-docs"},
        ),
        Chip(
            "v6e", "TPU v6e (Trillium)", bf16_flops=918e12, int8_ops=1836e12, fp8_flops=918e12,
            hbm_bytes=32 * GiB, hbm_bandwidth=1638 * GB, ici_bidirectional=800 * GB,
            ici_links=4, dcn_bandwidth=100e9 / 8, mxu=256, mxus_per_core=2, tensorcores=1,
            pod_chips=256,
            sources={"pod_chips": "v6e-docs", "bf16_flops": "v6e-docs", "int8_ops": "v6e-docs",
                     "fp8_flops": "tpu7x-docs", "hbm_bytes": "v6e-docs",
                     "hbm_bandwidth": "v6e-docs", "ici_bidirectional": "v6e-docs",
                     "ici_links": "v6e-docs", "dcn_bandwidth": "tpu7x-docs",
                     "mxu": "v6e-docs", "mxus_per_core": "v6e-docs", "tensorcores": "v6e-docs"},
        ),
        Chip(
            "v7", "TPU7x (Ironwood)", bf16_flops=2307e12, fp8_flops=4614e12,
            hbm_bytes=192 * GiB, hbm_bandwidth=7380 * GB, ici_bidirectional=1200 * GB,
            ici_links=6, dcn_bandwidth=100e9 / 8, mxu=256, mxus_per_core=2, tensorcores=2,
            pod_chips=9216,
            sources={"pod_chips": "tpu7x-docs", "bf16_flops": "tpu7x-docs",
                     "fp8_flops": "tpu7x-docs",
                     "hbm_bytes": "tpu7x-docs", "hbm_bandwidth": "tpu7x-docs",
                     "ici_bidirectional": "tpu7x-docs", "ici_links": "reasoning",
                     "dcn_bandwidth": "tpu7x-docs", "mxu": "jax-tpu-info",
                     "mxus_per_core": "jax-tpu-info", "tensorcores": "tpu7x-docs"},
        ),
    )
}
