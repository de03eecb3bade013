"""Pod slices: the multi-host tables (Cloud TPU's published configurations, TorchTPU's host
order), names with and without a host count, and where each rank of a slice runs."""

from __future__ import annotations

import pytest

from tpu_lab.errors import TopologyError
from tpu_lab.hardware.slices import HOST_BLOCK, multi_host
from tpu_lab.hardware.topology import parse_topology


def test_v6e_16_is_four_hosts_of_four_chips_in_a_4x4_mesh():
    topo = parse_topology("v6e-16")
    s = topo.slice
    assert (topo.name, topo.devices, topo.hosts, topo.shape) == ("v6e-16", 16, 4, (4, 4, 1))
    assert (s.hosts, s.devices_per_host, s.host_bounds) == (4, 4, (2, 2, 1))
    assert (s.accelerator_type, s.interconnect) == ("v6e-16", "2D torus")
    assert [list(s.ranks_of(h)) for h in range(4)] == [
        [0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14, 15]]  # fmt: skip
    # hosts in TorchTPU's NODE_RANK order (Z-major, X-minor), each a 2x2 block of chips
    assert [s.host_coords(h) for h in range(4)] == [(0, 0, 0), (1, 0, 0), (0, 1, 0), (1, 1, 0)]
    assert [s.chip_coords(r) for r in (0, 1, 2, 3, 4, 15)] == [
        (0, 0, 0), (1, 0, 0), (0, 1, 0), (1, 1, 0), (2, 0, 0), (3, 3, 0)]  # fmt: skip
    assert sorted(s.chip_coords(r) for r in range(16)) == sorted(
        (x, y, 0) for x in range(4) for y in range(4))  # fmt: skip
    assert (s.link(0, 3), s.link(3, 4)) == ("host", "ici")
    assert str(topo) == "v6e-16 (16 x TPU v6e, topology 4,4,1, 4 hosts of 4)"


def test_names_count_devices_and_keep_the_cloud_name():
    v5p = parse_topology("v5p-16").slice
    assert (v5p.chips, v5p.hosts, v5p.shape, v5p.accelerator_type) == (16, 4, (2, 2, 4), "v5p-32")
    v7 = parse_topology("v7-16").slice  # 8 chips of 2 devices, 8 ranks per host
    assert (v7.chips, v7.hosts, v7.devices_per_host, v7.shape) == (8, 2, 8, (2, 2, 2, 2))
    assert v7.chip_coords(9) == (0, 0, 1, 1)
    assert parse_topology("v5e-256").slice.accelerator_type == "v5litepod-256"
    assert parse_topology("v4-8").slice.accelerator_type == "v4-16"  # one host, 8 chips


def test_a_count_on_one_host_and_on_several_takes_the_host_count():
    assert parse_topology("v6e-8").hosts == 1
    two = parse_topology("v6e-8/2")
    assert (two.name, two.hosts, two.shape, two.slice.devices_per_host) == ("v6e-8/2", 2, (2, 4, 1), 4)
    assert parse_topology("v6e-16/4") == parse_topology("v6e-16")
    with pytest.raises(TopologyError) as info:
        parse_topology("v6e-16/2")
    assert str(info.value) == (
        "TPU v6e has no 16-device topology on 2 hosts; choose one of 1, 4, 8 (for example "
        "'v6e-8'), or a pod slice: v6e-8/2, v6e-16, v6e-32, v6e-64, v6e-128, v6e-256."
    )


def test_every_multi_host_slice_is_whole_hosts_of_the_host_block():
    for generation in ("v4", "v5e", "v5p", "v6e", "v7"):
        for (devices, hosts), s in multi_host(generation).items():
            assert s.host_shape[:3] == HOST_BLOCK
            assert s.chips * (2 if generation == "v7" else 1) == devices
            assert s.host_bounds[0] * s.host_bounds[1] * s.host_bounds[2] == hosts
            assert len({s.chip_coords(r) for r in range(devices)}) == devices
