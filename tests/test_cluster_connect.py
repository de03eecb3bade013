"""``%tpu cluster connect``: an ipyparallel cluster started outside the workbench, by
``ipcluster`` on one "host" and ``ipcluster engines`` on another, both on 127.0.0.1 and in
their own process groups, each host's engines with their own worker identity. The workbench
checks the engines, forms the "tpu_dist" group across the hosts, runs ``%%tpu spmd`` over it,
shows hosts and ranks, and detaches without stopping the engines; the test stops them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

import tpu_lab
from tpu_lab.launch import cluster as spmd

ROOT = Path(__file__).resolve().parents[1]
IPCLUSTER = str(Path(sys.executable).with_name("ipcluster"))
HOSTS = "host-a,host-b"
MARKER = "TPU_LAB_TEST_HOSTS"


class Hosts(list):
    """The two hosts' ipcluster processes, and the marker every process they start inherits."""

    marker = uuid.uuid4().hex


@pytest.fixture
def outside(tmp_path):
    """Host A: ipcluster (controller and 4 engines); host B: ipcluster engines (4 engines)."""
    common = ["--profile-dir", str(tmp_path), "--cluster-id", "pods", "--log-level", "40"]
    hosts = Hosts()
    base = {**os.environ, "PYTHONPATH": str(ROOT), "TPU_WORKER_HOSTNAMES": HOSTS,
            MARKER: hosts.marker}  # fmt: skip
    base.pop("TPU_LAB_TOPOLOGY", None)
    try:
        hosts.append(subprocess.Popen(
            [IPCLUSTER, "start", "-n", "4", "--ip", "127.0.0.1", *common],
            env={**base, "TPU_WORKER_ID": "0"}, start_new_session=True,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        ))  # fmt: skip
        engine_file = tmp_path / "security" / "ipcontroller-pods-engine.json"
        deadline = time.monotonic() + 60
        while not engine_file.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        hosts.append(subprocess.Popen(
            [IPCLUSTER, "engines", "-n", "4", *common],
            env={**base, "TPU_WORKER_ID": "1"}, start_new_session=True,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        ))  # fmt: skip
        yield tmp_path / "security" / "ipcontroller-pods-client.json", hosts
    finally:
        spmd.stop()
        subprocess.run([IPCLUSTER, "stop", *common], timeout=60, capture_output=True)
        for host in hosts:
            try:
                os.killpg(host.pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
        for host in hosts:
            try:
                host.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(host.pid, signal.SIGKILL)
                host.wait(10)
        _wait_gone(hosts)


def _group(hosts) -> list[psutil.Process]:
    """Every live process the two hosts started (ipcluster puts its controller and engines in
    sessions of their own: they are found by the marker in their environment)."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get(MARKER) == hosts.marker and proc.status() != "zombie":
                found.append(proc)
        except (psutil.Error, OSError):
            continue
    return found


def _wait_gone(hosts) -> None:
    deadline = time.monotonic() + 15
    while _group(hosts) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = _group(hosts)
    for proc in left:
        proc.kill()
    assert left == [], [p.cmdline() for p in left]


def test_connect_forms_tpu_dist_across_two_hosts_and_detaches(outside):
    url_file, hosts = outside
    import ipyparallel as ipp

    client = ipp.Client(str(url_file), timeout=60)
    client.wait_for_engines(8, timeout=120, interactive=False)
    client.close()
    sh = InteractiveShell.instance()
    tpu_lab.load_ipython_extension(sh)
    try:
        _connect_run_detach(sh, url_file, hosts)
    finally:  # ipyparallel sends later clients' outputs to a shell it finds
        InteractiveShell.clear_instance()


def _connect_run_detach(sh, url_file, hosts) -> None:
    with capture_output() as cap:
        sh.run_line_magic("tpu", f"cluster connect --url-file {url_file}")
    text = cap.outputs[0].data["text/plain"]
    assert "tpu_lab cluster v6e-8/2: ready" in text
    assert "2 hosts: host-a (ranks 0-3); host-b (ranks 4-7)" in text
    assert "7     host-b  " in text
    with capture_output() as cap:
        sh.run_cell_magic(
            "tpu", "spmd",
            "import os, torch, torch.distributed as dist\n"
            "x = torch.ones(2, device='tpu') * (dist.get_rank() + 1)\n"
            "dist.all_reduce(x)\n"
            "seen = [None] * dist.get_world_size()\n"
            "dist.all_gather_object(seen, os.environ['TPU_WORKER_ID'])\n"
            "print(dist.get_backend(), dist.get_world_size(), x.tolist(), ''.join(seen))\n",
        )  # fmt: skip
    assert "tpu_dist 8 [36.0, 36.0] 00001111" in cap.outputs[0].data["text/plain"]
    listening = {
        conn.laddr.ip
        for proc in _group(hosts)
        for conn in proc.net_connections(kind="inet")
        if conn.status == psutil.CONN_LISTEN
    }
    assert listening == {"127.0.0.1"}
    engines = {r.pid for r in spmd.current().ranks}
    sh.run_line_magic("tpu", "cluster stop")
    assert spmd.current().state == "stopped"
    assert engines <= {p.pid for p in _group(hosts)}  # detached: the engines are their owner's
