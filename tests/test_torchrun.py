"""torchrun on the bundled device: TorchTPU's distributed tutorial unchanged, a tensor-parallel
step on 4 processes equal to the unsharded step, a killed rank reported, nothing left running,
every listening socket on 127.0.0.1."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import psutil
import pytest
import torch

from tpu_lab.device.launch_env import set_tpu_launch_env, topology_for
from tpu_lab.launch.torchrun import LAUNCH_ENV, _result

ROOT = Path(__file__).resolve().parents[1]

# TorchTPU's hello_world_distributed.py, as its tutorial has it (torch_tpu: the stand-in here)
HELLO = """
import torch
from torch import distributed as dist
from torch_tpu import api

api.tpu_device()
dist.init_process_group(backend="tpu_dist")
ws = dist.get_world_size()
x = torch.tensor([0.0, 1.0, ws], device="tpu")
torch.distributed.all_reduce(x, op=dist.ReduceOp.SUM)
torch.testing.assert_close(x.cpu(), torch.tensor([0.0, ws, ws * ws]))
print("result: ", x)
"""

MODEL = """
import torch
torch.manual_seed(0)
model = torch.nn.Sequential(
    torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8)
).to("tpu")
x = torch.randn(4, 16, generator=torch.Generator().manual_seed(1)).to("tpu")
"""

TP_STEP = (
    """
import json, os, sys
import psutil
import torch.distributed as dist
import torch_tpu
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

dist.init_process_group("tpu_dist")
"""
    + MODEL
    + """
mesh = init_device_mesh("tpu", (dist.get_world_size(),))
parallelize_module(model, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
opt = torch.optim.SGD(model.parameters(), lr=0.1)
loss = model(x).square().mean()
loss.backward()
opt.step()
weights = {k: v.full_tensor().cpu().tolist() for k, v in model.state_dict().items()}
me, agent = psutil.Process(), psutil.Process(os.getppid())
listening = sorted({c.laddr.ip for p in (me, agent) for c in p.net_connections(kind="inet")
                    if c.status == psutil.CONN_LISTEN})
if dist.get_rank() == 0:
    with open(sys.argv[1], "w") as f:
        json.dump({"loss": loss.item(), "weights": weights, "world": dist.get_world_size(),
                   "chip": torch.tpu.get_device_name(), "listening": listening,
                   "standin": repr(torch_tpu)}, f)
dist.destroy_process_group()
"""
)

KILLED = """
import os, signal, time
import torch, torch.distributed as dist
import torch_tpu
dist.init_process_group("tpu_dist")
if dist.get_rank() == 2:
    os.kill(os.getpid(), signal.SIGKILL)
dist.barrier()
time.sleep(600)
"""


def _launch(tmp_path, script: str, *args: str, nproc: int = 4):
    path = tmp_path / "script.py"
    path.write_text(textwrap.dedent(script))
    marker = uuid.uuid4().hex
    env = {**os.environ, LAUNCH_ENV: marker, "PYTHONPATH": str(ROOT)}
    env.pop("TPU_LAB_TOPOLOGY", None)
    out = subprocess.run(
        [sys.executable, "-m", "tpu_lab.torchrun", "--nproc-per-node", str(nproc), str(path),
         *args],
        capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    return out, marker


def _left_running(marker: str) -> list[int]:
    left = []
    for p in psutil.process_iter():
        try:
            if p.environ().get(LAUNCH_ENV) == marker and p.status() != psutil.STATUS_ZOMBIE:
                left.append(p.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return left


def test_topology_has_one_chip_per_process():
    assert topology_for(4) == "v6e-4"
    assert topology_for(2) == "v5p-2"
    assert topology_for(8, "v5e") == "v5e-8"
    with pytest.raises(Exception, match="No simulated topology of any generation has 3 devices"):
        topology_for(3)


def test_set_tpu_launch_env_chooses_the_topology_and_never_overwrites(monkeypatch):
    # set_tpu_launch_env writes os.environ itself: the test works on a copy of it
    monkeypatch.setattr(os, "environ", dict(os.environ))
    for name in ("TPU_LAB_TOPOLOGY", "TORCH_TPU_TOPOLOGY", "TORCH_TPU_XPROF_SESSION_ID"):
        monkeypatch.delenv(name, raising=False)
    set_tpu_launch_env(nproc_per_node=8)
    assert os.environ["TPU_LAB_TOPOLOGY"] == "v6e-8"
    assert os.environ["TORCH_TPU_TOPOLOGY"] == "2,4,1"  # TorchTPU's format
    session = os.environ["TORCH_TPU_XPROF_SESSION_ID"]
    set_tpu_launch_env(nproc_per_node=4)
    assert os.environ["TPU_LAB_TOPOLOGY"] == "v6e-8"
    assert os.environ["TORCH_TPU_XPROF_SESSION_ID"] == session
    monkeypatch.delenv("TPU_WORKER_HOSTNAMES", raising=False)
    with pytest.raises(ValueError, match="expected environment variable TPU_WORKER_HOSTNAMES"):
        set_tpu_launch_env(nnodes=2, nproc_per_node=4)


def test_torchtpu_distributed_tutorial_runs_unchanged(tmp_path):
    out, marker = _launch(tmp_path, HELLO, nproc=2)
    assert out.returncode == 0, out.stderr[-3000:]
    # two ranks print at once: their words may interleave, each piece is whole
    assert out.stdout.count("tensor([0., 2., 4.], device='tpu:0')") == 2
    assert out.stdout.count("result: ") == 2
    assert "torchrun: 2 ranks on v5p-2 finished." in out.stdout
    assert _left_running(marker) == []


def test_tensor_parallel_step_on_4_processes_equals_the_unsharded_step(tmp_path):
    out, marker = _launch(tmp_path, TP_STEP, str(tmp_path / "tp4.json"))
    assert out.returncode == 0, out.stderr[-3000:]
    tp4 = json.loads((tmp_path / "tp4.json").read_text())
    assert tp4["world"] == 4 and tp4["chip"] == "TPU v6e (simulated)"
    assert "tpu_lab stand-in" in tp4["standin"]
    assert tp4["listening"] == ["127.0.0.1"]  # gloo and torchrun's store: loopback only
    assert _left_running(marker) == []

    scope: dict = {}
    exec(MODEL, scope)  # TP=1: the same model and step in one process
    model, x = scope["model"], scope["x"]
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loss = model(x).square().mean()
    loss.backward()
    opt.step()
    assert tp4["loss"] == pytest.approx(loss.item(), rel=1e-6, abs=1e-7)
    for name, value in model.state_dict().items():
        torch.testing.assert_close(torch.tensor(tp4["weights"][name]), value.cpu(),
                                   rtol=1e-5, atol=1e-6)  # fmt: skip


def test_a_killed_rank_is_reported_and_nothing_is_left(tmp_path):
    out, marker = _launch(tmp_path, KILLED)
    assert out.returncode == 1
    assert "torchrun: 1 of 4 ranks failed on v6e-4:" in out.stderr, out.stderr[-3000:]
    assert "rank 2 (pid " in out.stderr and ") killed by SIGKILL" in out.stderr
    assert "ranks 0, 1, 3: stopped by torchrun" in out.stderr
    assert _left_running(marker) == []


@pytest.mark.parametrize("stamps", [(5, 5, 5, 5), (4, 5, 5, 5), (5, 6, 5, 6)])
def test_the_report_names_the_rank_that_died_whatever_torchruns_timestamps(stamps):
    """CI's case: torchrun stopped rank 0 in the same second as rank 2 died, and its "first
    failure" (whole-second timestamps, ties to the lowest rank) named rank 0."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

    codes = (-signal.SIGTERM, -signal.SIGTERM, -signal.SIGKILL, -signal.SIGTERM)
    failures = {}
    for rank, (code, stamp) in enumerate(zip(codes, stamps, strict=True)):
        failures[rank] = ProcessFailure(rank, 100 + rank, code, "/nonexistent")
        failures[rank].timestamp = stamp
    report = str(_result(4, "v6e-4", ChildFailedError("script.py", failures)))
    assert report.splitlines() == [
        "torchrun: 1 of 4 ranks failed on v6e-4:",
        "  rank 2 (pid 102) killed by SIGKILL",
        "  ranks 0, 1, 3: stopped by torchrun",
    ]


def test_when_every_rank_was_terminated_the_first_is_the_one_that_failed():
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

    failures = {r: ProcessFailure(r, 100 + r, -signal.SIGTERM, "/nonexistent") for r in range(2)}
    failures[0].timestamp, failures[1].timestamp = 7, 6  # rank 1 was sent SIGTERM from outside
    report = str(_result(2, "v5p-2", ChildFailedError("script.py", failures)))
    assert report.splitlines()[1:] == ["  rank 1 (pid 101) killed by SIGTERM",
                                       "  rank 0: stopped by torchrun"]  # fmt: skip


def test_a_rank_that_raises_is_reported_with_its_error(tmp_path):
    out, marker = _launch(
        tmp_path,
        "import torch.distributed as dist, torch_tpu\n"
        "dist.init_process_group('tpu_dist')\n"
        "if dist.get_rank() == 1:\n    raise ValueError('bad shard on rank 1')\n"
        "dist.barrier()\n",
        nproc=2,
    )
    assert out.returncode == 1
    report = out.stderr[out.stderr.index("torchrun: "):]  # rank 0 may fail too: its peer left
    assert "ranks failed on v5p-2:" in report, out.stderr[-3000:]
    (line,) = [x for x in report.splitlines() if x.startswith("  rank 1 (pid ")]
    assert line.endswith(") exited with code 1: ValueError: bad shard on rank 1")
    assert _left_running(marker) == []


def test_on_a_tpu_vm_the_launch_environment_is_torchtpus(monkeypatch):
    """TorchTPU (0.2.0) gives each rank its chip through the variables its own
    set_tpu_launch_env sets in the parent; tpu_lab calls it there (torchrun and the cluster)."""
    import types

    from tpu_lab import runtime
    from tpu_lab.launch import torchrun

    calls = []

    def fake(*, nnodes=None, nproc_per_node=None):
        calls.append(nproc_per_node)
        os.environ.setdefault("TORCH_TPU_TOPOLOGY", "2,2,1")

    monkeypatch.setattr(os, "environ", dict(os.environ))  # the fake writes os.environ
    monkeypatch.delenv("TORCH_TPU_TOPOLOGY", raising=False)
    monkeypatch.setattr(runtime, "backend", lambda: types.SimpleNamespace(simulated=False))
    monkeypatch.setitem(vars(torch.tpu.distributed), "set_tpu_launch_env", fake)
    assert torchrun.prepare_launch(4) == "TPU 2,2,1"
    assert calls == [4]


def test_plain_torchrun_works_when_the_script_imports_tpu_lab(tmp_path):
    script = tmp_path / "plain.py"
    script.write_text(
        "import tpu_lab\nimport torch, torch.distributed as dist\n"
        "dist.init_process_group('tpu_dist')\n"
        "x = torch.ones(2, device='tpu') * (dist.get_rank() + 1)\ndist.all_reduce(x)\n"
        "if dist.get_rank() == 0:\n"
        "    print('sum', x.cpu().tolist(), tpu_lab.status().topology)\n"
        "dist.destroy_process_group()\n"
    )
    torchrun = Path(sys.executable).with_name("torchrun")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    env.pop("TPU_LAB_TOPOLOGY", None)
    out = subprocess.run(
        [str(torchrun), "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
         "--master-port", str(_port()), str(script)],
        capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == "sum [3.0, 3.0] v5p-2"  # each rank switched to a 2-chip topology


def _port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


TWO_HOSTS = """
import json, os, sys
import psutil
import torch, torch.distributed as dist
import torch_tpu
dist.init_process_group("tpu_dist")
x = torch.full((2,), float(dist.get_rank()), device="tpu")
dist.all_reduce(x)
keys = ("GROUP_RANK", "LOCAL_RANK", "TPU_WORKER_ID", "NODE_RANK", "TPU_VISIBLE_CHIPS",
        "TPU_LAB_TOPOLOGY", "TORCH_TPU_TOPOLOGY", "NNODES")
seen = [None] * dist.get_world_size()
dist.all_gather_object(seen, [os.environ.get(k) for k in keys])
me, agent = psutil.Process(), psutil.Process(os.getppid())
listening = sorted({c.laddr.ip for p in (me, agent) for c in p.net_connections(kind="inet")
                    if c.status == psutil.CONN_LISTEN})
if dist.get_rank() == 0:
    with open(sys.argv[1], "w") as f:
        json.dump({"sum": x.tolist(), "backend": dist.get_backend(), "seen": seen,
                   "listening": listening, "chip": torch.tpu.get_device_name()}, f)
dist.barrier()
dist.destroy_process_group()
"""


def test_two_hosts_of_torchrun_on_loopback_form_one_tpu_dist_group(tmp_path):
    import socket

    path = tmp_path / "script.py"
    path.write_text(textwrap.dedent(TWO_HOSTS))
    with socket.socket() as s:  # a free port for the first host's rendezvous store
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    marker = uuid.uuid4().hex
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TPU_", "TORCH_TPU_"))}
    env.update({LAUNCH_ENV: marker, "PYTHONPATH": str(ROOT)})  # two fresh hosts
    hosts = [
        subprocess.Popen(
            [sys.executable, "-m", "tpu_lab.torchrun", "--nnodes", "2", "--nproc-per-node", "4",
             "--node-rank", str(rank), "--rdzv-endpoint", f"127.0.0.1:{port}", str(path),
             str(tmp_path / "out.json")],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path,
            start_new_session=True,  # each host its own process group, as on two machines
        )  # fmt: skip
        for rank in (0, 1)
    ]
    outputs = [host.communicate(timeout=300) for host in hosts]
    for host, (_, err) in zip(hosts, outputs, strict=True):
        assert host.returncode == 0, err[-3000:]
    assert "torchrun: 4 ranks on v6e-8/2 finished." in outputs[0][0]
    got = json.loads((tmp_path / "out.json").read_text())
    assert got["sum"] == [28.0, 28.0] and got["backend"] == "tpu_dist"
    assert got["chip"] == "TPU v6e (simulated)"
    for rank, (group, local, worker, node, chip, name, mesh, nnodes) in enumerate(got["seen"]):
        assert (group, worker, node) == (str(rank // 4),) * 3
        assert (local, chip) == (str(rank % 4),) * 2
        assert (name, mesh, nnodes) == ("v6e-8/2", "2,4,1", "2")  # the slice, from outside
    assert got["listening"] == ["127.0.0.1"]  # the rendezvous store and gloo: loopback only
    assert _left_running(marker) == []
