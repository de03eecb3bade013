"""TorchTPU's launch environment for several hosts (torch-tpu 0.2.0's ``set_tpu_launch_env``
with ``nnodes > 1``) and what each host of a simulated pod slice starts with."""

from __future__ import annotations

import os

import pytest

from tpu_lab.device.launch_env import host_environment, launch_variables, set_tpu_launch_env

KEYS = ("TORCH_TPU_SLICEBUILDER_ADDRESSES", "TORCH_TPU_TOPOLOGY", "TORCH_TPU_XPROF_SESSION_ID",
        "NNODES", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "TPU_LAB_TOPOLOGY",
        "TPU_WORKER_HOSTNAMES", "JOB_COMPLETION_INDEX", "TPU_WORKER_ID")  # fmt: skip


@pytest.fixture
def clean(monkeypatch):
    """No launch variable set; afterwards the environment as it was (set_tpu_launch_env
    writes os.environ itself, which monkeypatch does not undo)."""
    saved = dict(os.environ)
    for key in KEYS:
        monkeypatch.delenv(key, raising=False)
    yield monkeypatch
    os.environ.clear()
    os.environ.update(saved)


def test_each_simulated_host_gets_a_pod_workers_environment():
    env = host_environment("v6e-16", 2)
    hosts = [f"tpu-lab-w-{i}" for i in range(4)]
    assert {k: v for k, v in env.items() if k != "TORCH_TPU_XPROF_SESSION_ID"} == {
        "TPU_LAB_TOPOLOGY": "v6e-16",
        "TPU_WORKER_ID": "2",
        "TPU_WORKER_HOSTNAMES": ",".join(hosts),
        "TPU_ACCELERATOR_TYPE": "v6e-16",
        "TPU_HOST_BOUNDS": "2,2,1",
        "TPU_CHIPS_PER_HOST_BOUNDS": "2,2,1",
        "TPU_PROCESS_BOUNDS": "4,4,1",
        "TPU_CHIPS_PER_PROCESS_BOUNDS": "1,1,1",
        "MASTER_ADDR": "127.0.0.1",  # given from outside: the simulated hosts share 127.0.0.1
        "TORCH_TPU_TOPOLOGY": "4,4,1",  # the slice's mesh, given from outside
        "TORCH_TPU_SLICEBUILDER_ADDRESSES": ",".join(
            f"{h}:{8070 + i}" for h in hosts for i in range(4)),  # fmt: skip
        "NNODES": "4",
        "NODE_RANK": "2",  # from the host's chips (2..3, 0..1) in the 4x4 mesh
        "MASTER_PORT": "29500",
    }
    assert env["TORCH_TPU_XPROF_SESSION_ID"].isdigit()
    assert host_environment("v6e-4", 0)["TORCH_TPU_TOPOLOGY"] == "2,2,1"


def test_multi_host_variables_as_torchtpus_own_tests_expect(clean):
    # torch_tpu's multihost launcher tests: two hosts, 8 ports each from 8070, master = host1
    clean.setenv("TPU_WORKER_HOSTNAMES", "host1,host2")
    clean.setenv("JOB_COMPLETION_INDEX", "1")
    set_tpu_launch_env(nproc_per_node=8)
    assert os.environ["TORCH_TPU_SLICEBUILDER_ADDRESSES"].split(",") == [
        f"{h}:{8070 + i}" for h in ("host1", "host2") for i in range(8)]  # fmt: skip
    assert [os.environ[k] for k in ("NNODES", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT")] == [
        "2", "1", "host1", "29500"]  # fmt: skip
    assert os.environ["TPU_LAB_TOPOLOGY"] == "v7-16"  # 2 hosts of 8: the slice that has them
    assert os.environ["TORCH_TPU_TOPOLOGY"] == "2,2,1,2"  # the host's own chips


def test_set_variables_are_kept_and_mismatches_fail_before_the_rendezvous(clean):
    env = {"TPU_WORKER_HOSTNAMES": "a,b,c,d", "TPU_WORKER_ID": "3", "MASTER_PORT": "12345",
           "TORCH_TPU_TOPOLOGY": "4,4,1"}  # fmt: skip
    out = launch_variables(env, nnodes=4, nproc_per_node=4)
    assert "MASTER_PORT" not in out and "TORCH_TPU_TOPOLOGY" not in out
    assert (out["NODE_RANK"], out["MASTER_ADDR"], out["TPU_LAB_TOPOLOGY"]) == ("3", "a", "v6e-16")
    with pytest.raises(ValueError) as info:
        launch_variables(env, nnodes=2, nproc_per_node=4)
    assert str(info.value) == (
        "set_tpu_launch_env(): expected nnodes to match the number of hosts in environment "
        'variable TPU_WORKER_HOSTNAMES (4: "a,b,c,d"), got 2'
    )
    with pytest.raises(ValueError, match="or environment variable JOB_COMPLETION_INDEX"):
        launch_variables({"TPU_WORKER_HOSTNAMES": "a,b,c,d"}, nproc_per_node=4)
