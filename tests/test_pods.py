"""A simulated pod slice: v6e-16, 4 hosts of 4 chips, 16 engines on this machine.

One cluster for the module (16 processes): each host's engines start with a pod worker's
environment; tensor parallelism within each host and data parallelism across hosts give the
loss and gradients of one process; killing every rank of one host is reported by host and rank,
the other hosts are stopped, and nothing is left running (the last test).
"""

from __future__ import annotations

import json
import os
import signal

import psutil
import pytest
import torch

import tpu_lab  # noqa: F401  (the "tpu" device)
from tpu_lab.errors import SpmdError
from tpu_lab.launch import cluster as spmd
from tpu_lab.launch.cluster import CLUSTER_ENV
from tpu_lab.views import view

# float32 TP=4 x DP=4 against one process: the row-wise layers and the data-parallel mean add
# partial sums in another order (observed: 3e-7 on the loss, 8e-8 on the gradients)
ATOL = RTOL = 1e-5


@pytest.fixture(scope="module")
def pod():
    c = spmd.start("v6e-16")
    try:
        yield c
    finally:
        spmd.stop()


def _tokens(hosts: int) -> torch.Tensor:
    return (torch.arange(hosts * 12).reshape(hosts, 12) * 7) % 256


def test_each_host_starts_with_a_pod_workers_environment(pod):
    assert pod.state == "ready" and len(pod.ranks) == 16
    assert pod.hosts() == {f"tpu-lab-w-{h}": tuple(range(4 * h, 4 * h + 4)) for h in range(4)}
    result = pod.run_cell(
        "import json, os, torch, torch.distributed as dist\n"
        "keys = ('TPU_WORKER_ID', 'NODE_RANK', 'LOCAL_RANK', 'TPU_VISIBLE_CHIPS', 'NNODES',\n"
        "        'TORCH_TPU_TOPOLOGY', 'TPU_ACCELERATOR_TYPE', 'TPU_LAB_TOPOLOGY')\n"
        "seen = [None] * dist.get_world_size()\n"
        "dist.all_gather_object(seen, [os.environ[k] for k in keys])\n"
        "print(json.dumps(seen))\n"
        "from torch.distributed.tensor import Replicate, Shard, distribute_tensor\n"
        "from tpu_lab.sharding.hybrid import host_mesh\n"
        "w = distribute_tensor(torch.ones(8, 4), host_mesh(), [Replicate(), Shard(0)])\n"
    )
    seen = json.loads(result.stdout)
    cell = view(result).to_text(width=200)
    assert "w  float32[8x4] on mesh (4, 4) Replicate(), Shard(0); dp: across hosts, tp: within " \
        "each host  [32 B / 32 B" in cell
    assert "HBM per chip, host by host (live, of 32.00 GiB):" in cell
    assert "  tpu-lab-w-3: 12: 32 B, 13: 32 B, 14: 32 B, 15: 32 B" in cell
    for rank, (worker, node, local, chip, nnodes, mesh, cloud, name) in enumerate(seen):
        assert (worker, node) == (str(rank // 4), str(rank // 4))
        assert (local, chip) == (str(rank % 4), str(rank % 4))
        assert (nnodes, mesh, cloud, name) == ("4", "4,4,1", "v6e-16", "v6e-16")
    text = view(pod).to_text(width=100)
    assert "4 hosts: tpu-lab-w-0 (ranks 0-3); tpu-lab-w-1 (ranks 4-7);" in text
    assert "15    tpu-lab-w-3  " in text
    listening = {
        conn.laddr.ip
        for p in pod.processes()
        for conn in p.net_connections(kind="inet")
        if conn.status == psutil.CONN_LISTEN
    }
    assert listening == {"127.0.0.1"}


def test_tp_within_hosts_and_dp_across_hosts_equals_one_process(pod, tmp_path):
    from transformers import AutoModelForCausalLM

    from tpu_lab.models import save_tiny_llama

    folder = save_tiny_llama(tmp_path / "llama", num_key_value_heads=4)
    out = tmp_path / "step.pt"
    result = pod.run_cell(
        "import torch, torch.distributed as dist\n"
        "from transformers import AutoModelForCausalLM\n"
        "from tpu_lab.sharding.hybrid import average_gradients, host_mesh, tensor_parallel\n"
        "mesh = host_mesh()  # dp: one row per host, tp: the 4 chips of a host\n"
        f"llama = AutoModelForCausalLM.from_pretrained({str(folder)!r}).to('tpu')\n"
        "llama = tensor_parallel(llama, mesh)\n"
        "hosts = mesh.size(0)\n"
        "tokens = (torch.arange(hosts * 12).reshape(hosts, 12) * 7) % 256\n"
        "mine = tokens[mesh.get_local_rank('dp')].unsqueeze(0).to('tpu')\n"
        "loss = llama(mine, labels=mine).loss\n"
        "loss.backward()\n"
        "average_gradients(llama, mesh)\n"
        "total = loss.detach().clone()\n"
        "dist.all_reduce(total, group=mesh.get_group('dp'))\n"
        "grads = {n: (p.grad.full_tensor() if hasattr(p.grad, 'full_tensor') else p.grad).cpu()\n"
        "         for n, p in llama.named_parameters()}\n"
        "if dist.get_rank() == 0:\n"
        f"    torch.save({{'loss': total.cpu() / hosts, 'grads': grads}}, {str(out)!r})\n"
        "str(llama.model.layers[0].self_attn.q_proj.weight.placements), tuple(mesh.shape)\n"
    )
    assert result.result["text/plain"] == "('(Shard(dim=0),)', (4, 4))"
    got = torch.load(out)
    one = AutoModelForCausalLM.from_pretrained(folder)  # one process, the whole batch, CPU
    loss = one(_tokens(4), labels=_tokens(4)).loss
    loss.backward()
    torch.testing.assert_close(got["loss"], loss.detach(), atol=ATOL, rtol=RTOL)
    assert got["grads"].keys() == dict(one.named_parameters()).keys()
    for name, param in one.named_parameters():
        torch.testing.assert_close(got["grads"][name], param.grad, atol=ATOL, rtol=RTOL,
                                   msg=name)  # fmt: skip


TINY_FLUX = {
    "patch_size": 1, "in_channels": 8, "num_layers": 1, "num_single_layers": 1,
    "attention_head_dim": 8, "num_attention_heads": 4, "joint_attention_dim": 16,
    "pooled_projection_dim": 8, "axes_dims_rope": (2, 2, 4),
}  # fmt: skip

FLUX_BATCH = """
g = torch.Generator().manual_seed(0)
batch = dict(
    hidden_states=torch.randn(4, 16, 8, generator=g),
    encoder_hidden_states=torch.randn(4, 6, 16, generator=g),
    pooled_projections=torch.randn(4, 8, generator=g),
    timestep=torch.tensor([0.1, 0.4, 0.6, 0.9]),
)
ids = dict(img_ids=torch.randn(16, 3, generator=g), txt_ids=torch.zeros(6, 3))
"""


def test_the_flux_transformer_tp_within_hosts_dp_across_hosts_equals_one_process(pod, tmp_path):
    """A TP x DP training step of the embedded Flux transformer: each host's replica on its own
    sample, diffusers' tensor parallelism within the host, gradients averaged across hosts,
    gives one process's loss and gradients on the whole batch. The per-head QK-norms (applied
    by each rank to its own heads) and the packed single-stream ``proj_out`` are what make
    this model harder than the Llama: without hybrid's handling of them, the QK-norms'
    gradients hold only one rank's heads' share and ``proj_out``'s columns come back shuffled."""
    from diffusers import FluxTransformer2DModel

    torch.manual_seed(0)
    FluxTransformer2DModel(**TINY_FLUX).save_pretrained(tmp_path / "flux")
    out = tmp_path / "flux_step.pt"
    result = pod.run_cell(
        "import torch, torch.distributed as dist\n"
        "from diffusers import FluxTransformer2DModel, TensorParallelConfig\n"
        "from tpu_lab.sharding.hybrid import average_gradients, full_tensors, host_mesh\n"
        "mesh = host_mesh()\n"
        f"flux = FluxTransformer2DModel.from_pretrained({str(tmp_path / 'flux')!r},\n"
        "    parallel_config=TensorParallelConfig(mesh=mesh['tp']))\n"
        + FLUX_BATCH
        + "host = mesh.get_local_rank('dp')\n"
        "mine = {k: v[host:host + 1].to('tpu') for k, v in batch.items()}\n"
        "mine.update({k: v.to('tpu') for k, v in ids.items()})\n"
        "loss = flux(**mine, return_dict=False)[0].square().mean()\n"
        "loss.backward()\n"
        "average_gradients(flux, mesh)\n"
        "total = loss.detach().clone()\n"
        "dist.all_reduce(total, group=mesh.get_group('dp'))\n"
        "grads, params = full_tensors(flux), full_tensors(flux, 'param')\n"
        "if dist.get_rank() == 0:\n"
        f"    torch.save({{'loss': total.cpu() / 4, 'grads': grads, 'params': params}}, {str(out)!r})\n"
        "str(flux.single_transformer_blocks[0].proj_out.weight.placements)\n"
    )
    assert result.result["text/plain"] == "'(Shard(dim=1),)'"
    got = torch.load(out)
    one = FluxTransformer2DModel.from_pretrained(tmp_path / "flux")  # one process, CPU
    scope = {"torch": torch}
    exec(FLUX_BATCH, scope)
    loss = one(**scope["batch"], **scope["ids"], return_dict=False)[0].square().mean()
    loss.backward()
    torch.testing.assert_close(got["loss"], loss.detach(), atol=ATOL, rtol=RTOL)
    assert got["grads"].keys() == dict(one.named_parameters()).keys()
    for name, param in one.named_parameters():
        assert torch.equal(got["params"][name], param.detach()), name
        torch.testing.assert_close(got["grads"][name], param.grad, atol=ATOL, rtol=RTOL,
                                   msg=name)  # fmt: skip


def test_a_lost_host_is_reported_by_host_and_rank_and_nothing_is_left(pod):
    lost = [r for r in pod.ranks if r.host == "tpu-lab-w-2"]
    marker = pod._id
    for rank in lost:
        os.kill(rank.pid, signal.SIGKILL)
    with pytest.raises(SpmdError) as info:
        pod.run_cell("import torch.distributed as dist\ndist.barrier()\n")
    message = str(info.value)
    assert message.startswith("Host tpu-lab-w-2 was lost: all of its ranks died (8, 9, 10, 11).")
    for rank in lost:
        assert f"rank {rank.rank} (pid {rank.pid}): the process was killed by signal SIGKILL" in (
            message)  # fmt: skip
    assert message.endswith(
        "The other 3 hosts were stopped; no process of the cluster is left. Start it again: "
        "%tpu cluster start v6e-16."
    )
    assert pod.state == "stopped"
    left = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get(CLUSTER_ENV) == marker and proc.status() != "zombie":
                left.append(proc.pid)
        except (psutil.Error, OSError):
            continue
    assert left == []
