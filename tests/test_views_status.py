"""The status view: text at a fixed width and self-contained HTML, from fixed data and live."""

from __future__ import annotations

import dataclasses
import re

import torch

import tpu_lab
from tpu_lab.events import Event
from tpu_lab.runtime import DeviceStatus
from tpu_lab.units import MemoryStats
from tpu_lab.views import StatusView

GiB = 1 << 30
STATUS = DeviceStatus(
    backend="tpu_lab bundled device",
    simulated=True,
    device_name="TPU v6e",
    topology="v6e-4",
    topology_shape=(2, 2, 1),
    chips=4,
    devices_in_process=1,
    memory=MemoryStats(32 * GiB, 8 * GiB, 12 * GiB, 10, 0),
    eager_mode="DEFER_AND_FUSE",
)
RECOMPILE = Event(
    2, "recompile", "recompiled f: argument x: dimension 0 changed from 3 to 4", 101.5, 4,
    "/home/me/train.py:12",
    {"changes": ["argument x: dimension 0 changed from 3 to 4"],
     "hints": ["pad or bucket this dimension"]},
)  # fmt: skip
SYNC = Event(4, "sync", "host waited for the device (item)", 103.0, 4, "/home/me/train.py:20")
CACHE = {"requests": 12, "hits": 9, "misses": 3}
COUNTS = {"compile": 1, "recompile": 1, "sync": 1}


def test_status_text_at_fixed_width():
    view = StatusView(STATUS, CACHE, [RECOMPILE, SYNC], COUNTS, dropped=2)
    assert view.to_text(width=100) == (
        "tpu_lab status\n"
        "  backend       tpu_lab bundled device (simulated on the CPU)\n"
        "  generation    TPU v6e\n"
        "  topology      v6e-4, 4 chips (mesh 2,2,1); this process drives 1 (tpu:0)\n"
        "  HBM tpu:0     ████████▒▒▒▒░░░░░░░░░░░░░░░░░░░   25.0%  live 8.00 GiB  peak 12.00 GiB  of 32.00 GiB\n"
        "  eager mode    DEFER_AND_FUSE (fuse)\n"
        "  compile cache 75% hit rate: 9 of 12 lookups, 3 compilation(s), since the kernel "
        "started\n"
        "  events        3 kept (2 older dropped): 1 compile, 1 recompile, 1 sync\n"
        "recent events (2)\n"
        "    2    [4] recompile   recompiled f: argument x: dimension 0 changed from 3 to 4       train.py:12\n"
        "                  fix: pad or bucket this dimension\n"
        "    4    [4] sync        host waited for the device (item)                               train.py:20"
    )
    assert all(len(line) <= 100 for line in view.to_text(width=100).splitlines())


def test_status_text_without_events_cache_or_memory_counters():
    hardware = DeviceStatus(
        "TorchTPU 0.2.0", False, "TPU v5e", "v5litepod-8", (2, 4), 8, 1,
        MemoryStats(16 * GiB, 0, 0, 0, 0, measured=False), "DEFER_NEVER",
    )  # fmt: skip
    assert StatusView(hardware, None).to_text(width=80) == (
        "tpu_lab status\n"
        "  backend       TorchTPU 0.2.0 (hardware)\n"
        "  generation    TPU v5e\n"
        "  topology      v5litepod-8, 8 chips (mesh 2,4); this process drives 1 (tpu:0)\n"
        "  HBM tpu:0     16.00 GiB per chip; usage not reported\n"
        "  eager mode    DEFER_NEVER (eager)\n"
        "  compile cache counters not reported by this backend\n"
        "  events        0 kept"
    )
    idle = StatusView(STATUS, {"requests": 0, "hits": 0, "misses": 0})
    assert "no lookups yet (each eager op, and each DEFER_AND_FUSE graph, is one)" in idle.to_text(
        100
    )


def test_status_html_is_self_contained_and_escaped():
    evil = DeviceStatus(
        "<script>alert(1)</script>", True, "TPU <b>v6e</b>", "v6e-1", (1, 1, 1), 1, 1,
        MemoryStats(32 * GiB, GiB, 2 * GiB, 1, 0), "DEFER_NEVER",
    )  # fmt: skip
    html = StatusView(evil, CACHE, [RECOMPILE, SYNC], COUNTS).to_html()
    assert "<script" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "TPU &lt;b&gt;v6e&lt;/b&gt;" in html
    assert "<style" not in html and "class=" not in html and "<link" not in html
    # the HBM bar: live 1 of 32 GiB, peak 2 of 32 GiB
    assert "<div style='width:3.12%;background:#2563eb'></div>" in html
    assert "<div style='width:3.12%;background:#93c5fd'></div>" in html
    cells = re.findall(r"<td style='padding:2px 8px;color:#6b7280[^']*'>([^<]+)</td>", html)
    assert cells == ["backend", "generation", "topology", "HBM tpu:0", "eager mode",
                     "compile cache", "events"]  # fmt: skip
    assert "75% hit rate: 9 of 12 lookups, 3 compilation(s), since the kernel started" in html
    assert "fix: pad or bucket this dimension" in html


def test_status_of_this_process():
    tpu_lab.events.log.clear()
    x = torch.ones(256, device="tpu")
    x.sum().item()
    view = StatusView.current(recent=2)
    text = view.to_text(width=120)
    assert text.startswith("tpu_lab status\n  backend       tpu_lab bundled device (simulated")
    assert f"eager mode    {torch.tpu.eager_mode.name}" in text
    assert [e.kind for e in view.recent] == [e.kind for e in tpu_lab.events.log.events()[-2:]]
    assert view.status.memory.live >= x.nbytes
    bundle = view._repr_mimebundle_()
    assert set(bundle) == {"text/plain", "text/html"}


def test_a_pod_slice_shows_its_hosts_and_chips_per_host():
    slice_status = dataclasses.replace(
        STATUS, topology="v6e-16", topology_shape=(4, 4, 1), chips=16, hosts=4
    )
    lines = StatusView(slice_status, CACHE).to_text(width=100).splitlines()
    assert lines[3] == (
        "  topology      v6e-16, 16 chips: 4 hosts x 4 chips (mesh 4,4,1); "
        "this process drives 1 (tpu:0)"
    )
    assert "16 chips: 4 hosts x 4 chips" in StatusView(slice_status, CACHE).to_html()


def test_the_bundled_device_reports_the_hosts_of_its_topology():
    from tpu_lab.runtime import backend

    b = backend()
    before = b.status().topology
    try:
        b.use_topology("v6e-16")
        status = b.status()
        assert (status.chips, status.hosts) == (16, 4)
    finally:
        b.use_topology(before)
    assert backend().status().hosts == 1


def test_torchtpu_hosts_come_from_the_environment_libtpu_reads(monkeypatch):
    from tpu_lab.runtime.torchtpu import _hosts

    monkeypatch.delenv("TPU_HOST_BOUNDS", raising=False)
    monkeypatch.delenv("TPU_WORKER_HOSTNAMES", raising=False)
    assert _hosts() == 1
    monkeypatch.setenv("TPU_WORKER_HOSTNAMES", "w-0,w-1,w-2,w-3")
    assert _hosts() == 4
    monkeypatch.setenv("TPU_HOST_BOUNDS", "2,2,2")
    assert _hosts() == 8
