"""The 4-engine SPMD cluster: one process per simulated v6e chip, "tpu_dist" process group.

One cluster is shared by the module (engines importing torch take seconds each); the tests run
in file order and the last ones break, restart and stop it.
"""

from __future__ import annotations

import psutil
import pytest
import torch

import tpu_lab  # noqa: F401  (the "tpu" device)
from tpu_lab.errors import SpmdError
from tpu_lab.launch import cluster as spmd
from tpu_lab.views import view

# float32 TP=4 against TP=1: the row-wise layers sum 4 partial products in another order
# (observed max |diff| 1.2e-7 for the Flux transformer and 1.8e-7 for the Llama logits).
ATOL = RTOL = 1e-5

TINY_FLUX = {
    "patch_size": 1,
    "in_channels": 8,
    "num_layers": 1,
    "num_single_layers": 1,
    "attention_head_dim": 8,
    "num_attention_heads": 4,
    "joint_attention_dim": 16,
    "pooled_projection_dim": 8,
    "axes_dims_rope": (2, 2, 4),
}

FLUX_INPUTS = """
g = torch.Generator().manual_seed(0)
inputs = dict(
    hidden_states=torch.randn(1, 16, 8, generator=g),
    encoder_hidden_states=torch.randn(1, 6, 16, generator=g),
    pooled_projections=torch.randn(1, 8, generator=g),
    timestep=torch.tensor([0.5]),
    img_ids=torch.randn(16, 3, generator=g),
    txt_ids=torch.zeros(6, 3),
)
inputs = {k: v.to("tpu") for k, v in inputs.items()}
"""


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """A saved tiny Flux transformer and tiny Llama, and their TP=1 outputs on "tpu"."""
    from diffusers import FluxTransformer2DModel
    from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

    from tpu_lab.models import TINY_LLAMA

    folder = tmp_path_factory.mktemp("cluster")
    torch.manual_seed(0)
    FluxTransformer2DModel(**TINY_FLUX).save_pretrained(folder / "flux")
    # tensor parallelism over 4 chips splits the key/value heads too: 4 of them, not 2
    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(**{**TINY_LLAMA, "num_key_value_heads": 4})).save_pretrained(
        folder / "llama"
    )
    flux = FluxTransformer2DModel.from_pretrained(folder / "flux").to("tpu")
    llama = AutoModelForCausalLM.from_pretrained(folder / "llama").to("tpu")
    scope = {"torch": torch}
    exec(FLUX_INPUTS, scope)
    with torch.no_grad():
        flux_out = flux(**scope["inputs"], return_dict=False)[0].cpu()
        logits = llama(torch.arange(12).reshape(1, 12).to("tpu")).logits.cpu()
    return folder, flux_out, logits


@pytest.fixture(scope="module")
def cluster():
    c = spmd.start("v6e-4")
    try:
        yield c
    finally:
        spmd.stop()


def test_cluster_starts_four_ranks_on_loopback(cluster):
    assert cluster.state == "ready"
    assert [r.rank for r in cluster.ranks] == [0, 1, 2, 3]
    assert len({r.pid for r in cluster.ranks}) == 4
    assert spmd.current() is cluster
    procs = cluster.processes()
    assert {r.pid for r in cluster.ranks} <= {p.pid for p in procs}
    listening = {
        conn.laddr.ip
        for p in procs
        for conn in p.net_connections(kind="inet")
        if conn.status == psutil.CONN_LISTEN
    }
    assert listening == {"127.0.0.1"}
    text = view(cluster).to_text(width=80)
    assert "tpu_lab cluster v6e-4: ready" in text
    assert "process group 'tpu_dist'" in text
    assert "<table>" in view(cluster).to_html()
    state = cluster.state_now()
    assert (state.topology, state.state) == ("v6e-4", "ready")
    assert [(rank, pid) for rank, pid, _ in state.ranks] == [(r.rank, r.pid) for r in cluster.ranks]
    assert {s for _, _, s in state.ranks} == {"running"}


def test_cell_runs_on_every_rank_with_collectives_and_sharding(cluster):
    result = cluster.run_cell(
        "import torch, torch.distributed as dist\n"
        "from torch.distributed.device_mesh import init_device_mesh\n"
        "from torch.distributed.tensor import Shard, distribute_tensor\n"
        "rank = dist.get_rank()\n"
        "x = torch.full((3,), float(rank + 1), device='tpu')\n"
        "dist.all_reduce(x)\n"
        "mesh = init_device_mesh('tpu', (4,))\n"
        "w = distribute_tensor(torch.arange(32.0).reshape(8, 4).to('tpu'), mesh, [Shard(0)])\n"
        "print('rank', rank, dist.get_backend(), x.tolist())\n"
        "x.sum().item()\n"
    )
    assert result.stdout == "rank 0 tpu_dist [10.0, 10.0, 10.0]\n"
    assert result.result["text/plain"] == "30.0"
    assert len(result.events) == 4
    (w,) = [v for v in result.sharding if v.name == "w"]
    assert w.local_bytes == (32, 32, 32, 32)
    assert w.info.global_shape == (8, 4)
    assert w.info.placements == ("Shard(0)",)
    assert w.info.bytes_per_chip == (32, 32, 32, 32)
    text = view(result).to_text(width=100)
    assert "SPMD cell on 4 ranks (v6e-4)" in text
    assert repr(view(result)) == view(result).to_text()
    assert "<table>" in view(result)._repr_mimebundle_()["text/html"]
    assert "  w  float32[8x4] on mesh (4,) Shard(0)  [32 B / 32 B / 32 B / 32 B]" in text, text


def test_diffusers_tensor_parallel_matches_tp1(cluster, models):
    folder, expected, _ = models
    out_path = folder / "flux_tp4.pt"
    result = cluster.run_cell(
        "import torch, torch.distributed as dist\n"
        "from diffusers import FluxTransformer2DModel, TensorParallelConfig\n"
        f"flux = FluxTransformer2DModel.from_pretrained({str(folder / 'flux')!r},\n"
        "    parallel_config=TensorParallelConfig(tp_degree=4))\n"
        + FLUX_INPUTS
        + "with torch.no_grad():\n"
        "    out = flux(**inputs, return_dict=False)[0]\n"
        f"if dist.get_rank() == 0:\n    torch.save(out.cpu(), {str(out_path)!r})\n"
    )
    got = torch.load(out_path)
    torch.testing.assert_close(got, expected, atol=ATOL, rtol=RTOL)
    (flux,) = [v for v in result.sharding if v.name == "flux"]
    assert flux.kind == "module"
    # every rank holds the same share: a quarter of each sharded weight, the rest whole
    from diffusers import FluxTransformer2DModel

    model = FluxTransformer2DModel.from_pretrained(folder / "flux")
    whole = sum(t.numel() * t.element_size() for t in [*model.parameters(), *model.buffers()])
    assert len(set(flux.local_bytes)) == 1
    assert whole / 4 < flux.local_bytes[0] < whole


def test_transformers_tp_plan_auto_matches_tp1(cluster, models):
    folder, _, expected = models
    out_path = folder / "llama_tp4.pt"
    result = cluster.run_cell(
        "import torch, torch.distributed as dist\n"
        "from transformers import AutoModelForCausalLM\n"
        f"llama = AutoModelForCausalLM.from_pretrained({str(folder / 'llama')!r}, "
        "tp_plan='auto')\n"
        "with torch.no_grad():\n"
        "    logits = llama(torch.arange(12).reshape(1, 12).to('tpu')).logits\n"
        f"if dist.get_rank() == 0:\n    torch.save(logits.cpu(), {str(out_path)!r})\n"
        "str(llama.model.layers[0].self_attn.q_proj.weight.placements)\n"
    )
    torch.testing.assert_close(torch.load(out_path), expected, atol=ATOL, rtol=RTOL)
    assert result.result["text/plain"] == "'(Shard(dim=0),)'"


def test_a_widget_on_an_engine_keeps_the_reply_in_a_shell_without_a_kernel(cluster):
    """A terminal IPython has no kernel to relay an engine's comm messages (a progress bar
    from_pretrained shows); the cell's result must still arrive whole."""
    from IPython.core.interactiveshell import InteractiveShell

    had_shell = InteractiveShell.initialized()
    InteractiveShell.instance()
    try:
        result = cluster.run_cell(
            "import ipywidgets\n"
            "from IPython.display import display\n"
            "display(ipywidgets.IntProgress(value=3, max=4))\n"
            "6 * 7\n"
        )
    finally:
        if not had_shell:
            InteractiveShell.clear_instance()
    assert result.result["text/plain"] == "42"


def test_a_rank_that_raises_is_reported_and_the_cluster_goes_on(cluster):
    with pytest.raises(SpmdError) as info:
        cluster.run_cell(
            "import torch.distributed as dist\n"
            "if dist.get_rank() == 2:\n"
            "    raise ValueError('boom on rank 2')\n"
        )
    message = str(info.value)
    assert message.startswith("The cell failed on 1 of 4 ranks (2).")
    assert "rank 2 (pid" in message and "raised" in message
    assert "ValueError: boom on rank 2" in message
    assert "restart" not in message
    assert cluster.state == "ready"
    assert cluster.run_cell("1 + 1").result["text/plain"] == "2"


def test_a_cell_failing_alike_on_every_rank_shows_one_traceback_and_the_planners_fix(cluster):
    """A tensor-parallel model whose key/value heads (2) do not divide over the 4 ranks: its
    forward fails with a shape error on every rank; the message gives the planner's words and
    the traceback once."""
    with pytest.raises(SpmdError) as info:
        cluster.run_cell(
            "from transformers import LlamaConfig, LlamaForCausalLM\n"
            "from tpu_lab.models import TINY_LLAMA\n"
            "llama = LlamaForCausalLM(LlamaConfig(**TINY_LLAMA))\n"
            "raise RuntimeError(\"shape '[1, 12, -1, 16]' is invalid for input of size 96\")\n"
        )
    message = str(info.value)
    assert message.startswith(
        "The cell failed on 4 of 4 ranks (0-3), the same way on each.\n\n"
        "The tensor-parallel plan does not divide over 4 ranks. The planner says: llama: "
        "Cannot split model.layers.0.self_attn.k_proj.weight over 4 chips: 'colwise' splits "
        "dim 0 into per-chip heads, but num_key_value_heads=2 does not divide by 4 "
    )
    assert "Use a chip count that divides 2: 1, 2.\n\nranks 0-3 raised the same way:\n" in message
    assert message.count("RuntimeError: shape") == 1
    assert cluster.state == "ready"


def test_a_name_the_ranks_do_not_know_says_what_to_run():
    with pytest.raises(SpmdError) as info:
        spmd.current().run_cell("undefined_name + 1")
    assert ("The ranks do not know undefined_name: the ranks of a cluster started (or restarted) "
            "begin with an empty namespace. tpu_lab ran the imports of your earlier %%tpu spmd "
            "cells on them (") in str(info.value)
    assert str(info.value).count("NameError: name 'undefined_name' is not defined") == 1


def test_ranks_left_waiting_say_where_they_wait_and_restart_recovers(cluster):
    with pytest.raises(SpmdError) as info:
        cluster.run_cell(
            "import torch.distributed as dist\n"
            "if dist.get_rank() == 2:\n"
            "    raise ValueError('boom on rank 2')\n"
            "dist.barrier()\n"
        )
    message = str(info.value)
    assert message.startswith("The cell failed on 4 of 4 ranks (0-3).")
    assert "%tpu cluster restart" in message
    assert "ValueError: boom on rank 2" in message
    for rank in (0, 1, 3):
        waiting = message.split(f"rank {rank} (pid")[1].split("\n\nrank ")[0]
        assert "did not finish" in waiting
        assert "waiting in a collective for the failed ranks" in waiting
        # faulthandler's stack of the rank's main thread, from the barrier down to the cell
        assert "where it is now (most recent call first):" in waiting
        frames = waiting.split("(most recent call first):\n")[1].splitlines()
        assert frames[0].startswith('  File "') and "tpu_dist.py" in frames[0], frames
        assert any(line.endswith(" in barrier") for line in frames), frames
        assert "interactiveshell.py" not in waiting
    assert cluster.state == "broken"
    spmd.restart()
    assert cluster.run_cell("1 + 1").result["text/plain"] == "2"
    # the restarted ranks have the imports of the cells before: torch, dist, LlamaConfig...
    assert cluster.run_cell("dist.get_world_size(), LlamaConfig.__name__").result[
        "text/plain"] == "(4, 'LlamaConfig')"


def test_a_killed_rank_is_reported_and_restart_recovers(cluster):
    killed = cluster.ranks[1].pid
    with pytest.raises(SpmdError) as info:
        cluster.run_cell(
            "import os, signal, time, torch.distributed as dist\n"
            "if dist.get_rank() == 1:\n"
            "    os.kill(os.getpid(), signal.SIGKILL)\n"
            "time.sleep(30)\n"
        )
    message = str(info.value)
    assert f"rank 1 (pid {killed}) died" in message
    assert "%tpu cluster restart" in message
    assert cluster.state == "broken"
    assert "died" in view(cluster).to_text(width=80)
    with pytest.raises(SpmdError, match="The cluster is broken. Restart it"):
        cluster.run_cell("1")
    spmd.restart()
    assert cluster.state == "ready"
    assert killed not in {r.pid for r in cluster.ranks}
    assert cluster.run_cell(
        "import torch.distributed as dist\ndist.get_world_size()"
    ).result == {"text/plain": "4"}


def test_stop_leaves_no_process(cluster):
    pids = [p.pid for p in cluster.processes()]
    assert len(pids) >= 5  # the controller and four engines
    spmd.stop()
    assert cluster.state == "stopped"
    assert cluster.processes() == []
    assert not [pid for pid in pids if psutil.pid_exists(pid)]
    with pytest.raises(SpmdError, match="The cluster is stopped. Start it"):
        cluster.run_cell("1")


ORPHAN_SCRIPT = """
import sys, time
import tpu_lab
from tpu_lab.launch import cluster
c = cluster.start("v6e-4")
print(" ".join(str(p.pid) for p in c.processes()), flush=True)
if sys.argv[1] == "kill":
    time.sleep(120)
"""


def _gone(pids, timeout_s: float) -> list[int]:
    """The pids still alive (not zombies) after waiting up to ``timeout_s``."""
    import time

    deadline = time.monotonic() + timeout_s
    while True:
        alive = []
        for pid in pids:
            try:
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    alive.append(pid)
            except psutil.NoSuchProcess:
                continue
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.2)


@pytest.mark.parametrize("how", ["exit", "kill"])
def test_the_owner_exiting_or_killed_leaves_no_process(how):
    """atexit stops the cluster; if the owner is SIGKILLed the engines and controller exit."""
    import subprocess
    import sys

    proc = subprocess.Popen(
        [sys.executable, "-c", ORPHAN_SCRIPT, how], stdout=subprocess.PIPE, text=True
    )
    try:
        pids = [int(p) for p in proc.stdout.readline().split()]
        assert len(pids) >= 5
        if how == "kill":
            proc.kill()
        proc.wait(timeout=60)
        assert _gone(pids, timeout_s=10) == []
    finally:
        proc.kill()
        proc.wait()
