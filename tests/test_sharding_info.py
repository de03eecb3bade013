"""ShardingInfo: the slices and bytes each chip holds, checked against real DTensor shards."""

from __future__ import annotations

import pytest
import torch
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import Replicate, Shard, distribute_tensor
from torch.distributed.tensor.placement_types import _StridedShard

from tpu_lab.errors import ShardingError, TpuLabError
from tpu_lab.sharding import layout_info, model_layout, sharding_info
from tpu_lab.sharding.info import REPLICATE, Split, format_box, shard
from tpu_lab.sharding.mesh import SimulatedMesh, per_chip


def _gather(full: torch.Tensor, boxes) -> torch.Tensor:
    """The chip's local tensor rebuilt from its boxes of the global tensor."""
    out = full
    for d in range(full.dim()):
        spans = sorted({(b[d].start, b[d].stop) for b in boxes})
        idx = torch.cat([torch.arange(a, b) for a, b in spans])
        out = out.index_select(d, idx)
    return out


CASES = [
    ((16, 6), (4,), [Shard(0)]),
    ((6, 16), (4,), [Shard(1)]),
    ((10, 3), (4,), [Shard(0)]),  # uneven: torch.chunk sizes 3, 3, 3, 1
    ((5, 7), (4,), [Replicate()]),
    ((16, 4), (4,), [_StridedShard(0, split_factor=2)]),
    ((8, 6, 4), (2, 2), [Shard(0), Shard(2)]),
    ((16, 2), (2, 2), [Shard(0), Shard(0)]),
    ((16, 2), (2, 2), [_StridedShard(0, split_factor=2), Shard(0)]),
    ((4, 6, 8, 2), (2, 2), [Replicate(), Shard(2)]),
]


@pytest.mark.parametrize(("shape", "mesh_shape", "placements"), CASES)
def test_sharding_info_matches_the_real_dtensor_shards(shape, mesh_shape, placements):
    full = torch.arange(torch.Size(shape).numel(), dtype=torch.float32).reshape(shape)
    names = ("tp",) if len(mesh_shape) == 1 else ("dp", "tp")
    with SimulatedMesh(4) as sim:
        mesh = DeviceMesh("cpu", torch.arange(4).reshape(mesh_shape), mesh_dim_names=names)
        d = distribute_tensor(sim.replicated(full), mesh, placements)
        info = sharding_info(d)
        shards = per_chip(d)
    assert info.global_shape == shape
    assert info.mesh_shape == mesh_shape and info.mesh_axis_names == names
    for chip, local in enumerate(shards):
        assert torch.equal(_gather(full, info.slices[chip]), local), chip
        assert info.bytes_per_chip[chip] == local.nbytes
        assert info.local_shape(chip) == tuple(local.shape)


def test_uneven_shard_bytes_and_slices():
    info = layout_info((10, 3), torch.float32, (4,), (shard(0),))
    assert info.bytes_per_chip == (36, 36, 36, 12)
    assert [format_box(b[0]) for b in info.slices] == [
        "[0:3, 0:3]", "[3:6, 0:3]", "[6:9, 0:3]", "[9:10, 0:3]"]
    assert info.sharded_dims == (0,)
    assert info.placements == ("Shard(0)",)


def test_fused_blocks_give_each_chip_a_slice_of_every_block():
    info = layout_info((12, 2), torch.bfloat16, (2,), (Split("shard", 0, blocks=(4, 8)),))
    assert [[format_box(b) for b in boxes] for boxes in info.slices] == [
        ["[0:2, 0:2]", "[4:8, 0:2]"], ["[2:4, 0:2]", "[8:12, 0:2]"]]
    assert info.bytes_per_chip == (24, 24)
    assert info.placements == ("Shard(0, blocks=[4, 8])",)


def test_replicated_and_plain_tensors():
    info = layout_info((4, 3), torch.float16, (2, 2), (REPLICATE, REPLICATE), ("a", "b"))
    assert info.bytes_per_chip == (24,) * 4 and info.sharded_dims == ()
    assert info.coordinate(3) == (1, 1) and info.global_bytes == 24
    plain = sharding_info(torch.ones(2, 5, dtype=torch.float64))
    assert plain.mesh_shape == (1,) and plain.bytes_per_chip == (80,)
    assert plain.slices == (((slice(0, 2), slice(0, 5)),),)


def test_sharding_info_refuses_what_is_not_a_tensor():
    with pytest.raises(ShardingError, match=r"needs a torch.Tensor or a DTensor, got list") as e:
        sharding_info([1, 2])
    assert isinstance(e.value, TpuLabError)


def test_model_layout_lists_tied_weights_once_with_their_alias():
    emb = torch.nn.Embedding(8, 4)
    head = torch.nn.Linear(4, 8, bias=False)
    head.weight = emb.weight
    model = torch.nn.Sequential(emb, head)
    model.register_buffer("scale", torch.ones(3))
    layout = model_layout(model)
    assert [(e.name, e.kind, e.aliases) for e in layout.entries] == [
        ("0.weight", "parameter", ("1.weight",)), ("scale", "buffer", ())]
    assert layout.bytes_per_chip == (8 * 4 * 4 + 12,)
    assert layout["1.weight"].name == "0.weight"
