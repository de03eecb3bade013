"""The one-process mesh: tensor-parallel forwards equal the unsharded model, shards match plans."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from transformers import LlamaConfig, LlamaForCausalLM

from tpu_lab.errors import ShardingError
from tpu_lab.models import TINY_LLAMA
from tpu_lab.sharding import SimulatedMesh, plan, sharding_info, simulate
from tpu_lab.sharding.mesh import per_chip, tolerance

LLAMA4 = dict(TINY_LLAMA, num_key_value_heads=4)


@pytest.fixture(scope="module")
def llama():
    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(**LLAMA4)).eval()


def test_tp_forward_of_tiny_llama_equals_the_unsharded_model(llama):
    ids = torch.randint(0, 256, (2, 8), generator=torch.Generator().manual_seed(1))
    run = simulate(llama, ids, chips=4)
    with torch.no_grad():
        expected = llama(ids).logits
    assert torch.equal(run.reference, expected)
    assert len(run.outputs) == 4
    for out in run.outputs:  # every chip ends with the gathered logits
        torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-5)
    assert run.matches and (run.rtol, run.atol) == tolerance(torch.float32) == (1e-4, 1e-5)
    # rowwise o_proj/down_proj in 2 layers + the vocab-split embedding: 5 all-reduces;
    # lm_head gathers its column shards once
    assert run.comms == (("all_gather", 1), ("all_reduce", 5))
    assert not isinstance(llama.lm_head.weight, torch.distributed.tensor.DTensor)


def test_real_shards_and_bytes_match_the_plan(llama):
    planned = plan(llama.config, chips=4).layout
    full = {n: p.detach().clone() for n, p in llama.named_parameters()}
    model = LlamaForCausalLM(llama.config)
    model.load_state_dict(llama.state_dict())
    with SimulatedMesh(4) as mesh:
        mesh.parallelize(model)
        params = dict(model.named_parameters())
        for name, p in params.items():
            entry = planned[name]
            if entry.style is None:  # replicated: every chip holds the whole tensor
                assert not isinstance(p, torch.distributed.tensor.DTensor), name
                assert all(torch.equal(t, full[name]) for t in per_chip(p)), name
                continue
            info = sharding_info(p)
            assert info == entry.info, name
            for chip, local in enumerate(per_chip(p)):
                (box,) = info.slices[chip]
                assert torch.equal(local, full[name][box]), (name, chip)
                assert local.nbytes == entry.info.bytes_per_chip[chip]
    run = simulate(llama, torch.zeros(1, 4, dtype=torch.long), chips=4)
    assert run.shard_bytes_per_chip == planned.bytes_per_chip
    assert run.layout.bytes_per_chip == planned.bytes_per_chip


class MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = torch.nn.Linear(16, 32)
        self.down = torch.nn.Linear(32, 16)

    def forward(self, x):
        return self.down(torch.relu(self.up(x)))


def test_torch_module_with_a_user_plan_in_bfloat16():
    torch.manual_seed(0)
    mlp = MLP().to(torch.bfloat16)
    x = torch.randn(3, 16, dtype=torch.bfloat16)
    run = simulate(mlp, x, chips=2, tp_plan={"up": "colwise", "down": "rowwise"})
    assert run.matches and (run.rtol, run.atol) == (2e-2, 2e-2)
    assert run.comms == (("all_reduce", 1),)
    # up: half of weight + bias; down: half of weight, whole bias; bf16 = 2 bytes
    assert run.shard_bytes_per_chip == ((16 * 16 + 16 + 16 * 16 + 16) * 2,) * 2


SHARED_RELU = torch.nn.ReLU()


class SharedAct(torch.nn.Module):
    """Two MLP blocks that call one activation module, as transformers 5.25's Llama calls one
    hub-kernel function module from every layer."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList(MLP() for _ in range(2))

    def forward(self, x):
        for block in self.blocks:
            x = block.down(SHARED_RELU(block.up(x)))
        return x


def test_a_module_called_twice_in_one_forward_runs_and_runs_again():
    # torch's CommDebugMode module tracker fails on this (IndexError) and leaves hooks on the
    # shared module that break its later forwards, on or off the mesh
    torch.manual_seed(0)
    model, x = SharedAct(), torch.randn(3, 16)
    plan_ = {"blocks.*.up": "colwise", "blocks.*.down": "rowwise"}
    for _ in range(2):
        run = simulate(model, x, chips=2, tp_plan=plan_)
        assert run.matches and run.comms == (("all_reduce", 2),)
    assert not SHARED_RELU._forward_hooks and not SHARED_RELU._forward_pre_hooks
    with torch.no_grad():
        assert torch.equal(model(x), run.reference)


def test_the_mesh_refuses_what_the_plan_refuses_and_cleans_up():
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**TINY_LLAMA))
    with pytest.raises(ShardingError, match="num_key_value_heads=2 does not divide by 4"), \
            SimulatedMesh(4) as mesh:
        mesh.parallelize(model)
    assert not dist.is_initialized()
    with torch.device("meta"):
        meta = MLP()
    with pytest.raises(ShardingError, match="on the meta device: a mesh run needs weights"), \
            SimulatedMesh(2) as mesh:
        mesh.parallelize(meta, {"up": "colwise"})
    with pytest.raises(ShardingError, match=r"Use the mesh inside `with SimulatedMesh"):
        SimulatedMesh(2).run(print)


def test_a_mesh_needs_a_process_without_a_process_group():
    dist.init_process_group("gloo", rank=0, world_size=1, store=dist.HashStore())
    try:
        with pytest.raises(ShardingError, match="torch.distributed is already initialised in "
                                                "this process \\(backend 'gloo', world size 1\\)"):
            SimulatedMesh(2).__enter__()
    finally:
        dist.destroy_process_group()
