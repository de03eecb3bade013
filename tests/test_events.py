"""The event log: compilations and recompilations explained, sync points, transfers, threads."""

from __future__ import annotations

import io
import json
import threading
from pathlib import Path

import pytest
import torch

import tpu_lab
from tpu_lab import events
from tpu_lab.events import EventLog, explain_guard

HERE = __file__


@pytest.fixture
def log():
    events.reset()  # also collects compilations Dynamo still holds from earlier tests
    yield events.log
    events.reset()


def test_compiled_function_called_with_three_shapes_recompiles_twice(log):
    torch._dynamo.reset()

    @torch.compile(backend="tpu")
    def f(x):
        return x * 2 + 1

    for n in (3, 4, 5):
        f(torch.ones(n, device="tpu"))
    compiles = log.events("compile")
    recompiles = log.events("recompile")
    assert len(compiles) == 1 and len(recompiles) == 2
    first, second = recompiles
    assert first.details["reason"].endswith(
        "tensor 'x' size mismatch at index 0. expected 3, actual 4"
    )
    assert first.details["changes"] == ["argument x: dimension 0 changed from 3 to 4"]
    assert second.details["changes"] == ["argument x: dimension 0 changed from 4 to 5"]
    assert "torch._dynamo.mark_dynamic(x, 0)" in first.details["hints"][0]
    for e in (*compiles, *recompiles):
        assert e.where.startswith(f"{HERE}:")  # the test's own call site, not torch's
        assert e.details["function"].startswith("f (")
    assert second.details["site_compile_seconds"] >= first.details["compile_seconds"]


def test_recompilation_storm_is_flagged(log):
    torch._dynamo.reset()
    f = torch.compile(lambda x: x + 1, backend="tpu")
    for n in range(1, 7):
        f(torch.ones(n, device="tpu"))
    recompiles = log.events("recompile")
    assert [e.details["storm"] for e in recompiles] == [False, False, False, True, True]
    assert "recompilation storm: 4 recompiles at this call site" in recompiles[3].summary


def test_item_in_a_loop_gives_sync_events_at_the_users_line(log):
    x = torch.ones(4, device="tpu")
    total = 0.0
    for _ in range(3):
        total += x.sum().item()  # the line the events must point at
    lines = Path(HERE).read_text().splitlines()
    line = next(i for i, text in enumerate(lines, 1) if "the line the events must point at" in text)
    syncs = log.events("sync")
    assert [e.where for e in syncs] == [f"{HERE}:{line}"] * 3
    assert all(e.details["reason"] == "item" for e in syncs)


def test_transfers_record_bytes_and_direction(log):
    x = torch.ones(256).to("tpu")
    x.cpu()
    transfers = log.events("transfer")
    assert [(e.details["direction"], e.details["nbytes"]) for e in transfers] == [
        ("cpu->tpu", 1024),
        ("tpu->cpu", 1024),
    ]
    assert transfers[1].summary == "tpu->cpu copy of 1.00 KiB"
    assert log.events("sync")[-1].details["reason"] == "copy to host"


def test_oom_and_mode_changes_are_recorded(log):
    with pytest.raises(torch.OutOfMemoryError):
        torch.empty(64 << 30, dtype=torch.uint8, device="tpu")
    with torch.tpu.set_eager_mode(torch.tpu.EagerMode.DEFER_AND_FUSE):
        pass
    (oom,) = log.events("oom")
    assert oom.details["nbytes"] == 64 << 30 and oom.where.startswith(HERE)
    modes = [e.summary for e in log.events("mode_change")]
    assert modes == [
        "eager mode DEFER_NEVER -> DEFER_AND_FUSE",
        "eager mode DEFER_AND_FUSE -> DEFER_NEVER",
    ]


def test_four_threads_lose_nothing_and_the_bound_holds():
    small = EventLog(capacity=1000)
    seen = []
    small.subscribe(lambda snapshot: seen.append(snapshot.event))

    def write(t):
        for i in range(500):
            small.record("sync", f"thread {t} event {i}")

    threads = [threading.Thread(target=write, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(seen) == 2000  # every event reached the subscriber
    assert [e.seq for e in seen] == sorted(e.seq for e in seen) or len(
        {e.seq for e in seen}
    ) == 2000
    assert len(small) == 1000 and small.dropped == 1000
    kept = small.events()
    assert [e.seq for e in kept] == list(range(1001, 2001))
    for t in range(4):  # each thread's events kept in its own order
        mine = [int(e.summary.split()[-1]) for e in kept if e.summary.startswith(f"thread {t} ")]
        assert mine == sorted(mine)


def test_events_export_as_json_lines(log):
    torch.ones(2).to("tpu")
    out = io.StringIO()
    assert log.write_jsonl(out) == 1
    record = json.loads(out.getvalue())
    assert record["kind"] == "transfer" and record["details"]["nbytes"] == 8


def test_bad_kind_and_capacity_are_clear_errors():
    with pytest.raises(ValueError, match="Unknown event kind 'compiled'; use one of compile, "):
        EventLog().record("compiled", "x")
    with pytest.raises(ValueError, match="room for at least 1 event, got 0"):
        EventLog(capacity=0)


@pytest.mark.parametrize(
    ("reason", "change", "kind"),
    [
        (
            "0/0: tensor 'x' size mismatch at index 1. expected 77, actual 78",
            "argument x: dimension 1 changed from 77 to 78",
            "shape",
        ),
        (
            "0/1: n == 2      #   # <stdin>:8 in f\nUser stack trace:",
            "the Python value n was 2 when compiled: it is baked into the graph as a constant",
            "scalar",
        ),
        (
            "0/4: tensor 'x' dtype mismatch. expected Half, actual Float",
            "argument x: dtype changed from torch.float16 to torch.float32",
            "dtype",
        ),
        (
            "0/0: tensor 'x' rank mismatch. expected 1, actual 2",
            "argument x: number of dimensions changed from 1 to 2",
            "rank",
        ),
        (
            "0/0: tensor 'L['x']' requires_grad mismatch. expected requires_grad=0",
            "argument x now requires grad",
            "requires_grad",
        ),
        ("0/2: len(L['xs']) == 3", "the length of xs changed (it was 3)", "length"),
    ],
)
def test_explanations(reason, change, kind):
    explanation = explain_guard(reason)
    assert (explanation.change, explanation.kind) == (change, kind)
    assert explanation.hint and "above" not in explanation.hint


def test_rank_dtype_and_unknown_guards_name_a_concrete_fix():
    assert explain_guard("0/0: tensor 'x' rank mismatch. expected 1, actual 2").hint == (
        "reshape x to the 1 dimension it was compiled with (x.reshape(-1)), or keep one "
        "compiled function per number of dimensions: a graph is compiled for one")
    assert explain_guard("0/1: tensor 'x' dtype mismatch. expected Float, actual BFloat16"
                         ).hint == ("cast it back before the call (x.to(torch.float32)), or "
                                    "compile once per dtype on purpose: a graph is compiled "
                                    "for one dtype")
    other = explain_guard("0/0: ___something_new(L['cfg'])")
    assert other.kind == "other" and other.hint.startswith("the guard names the input that "
                                                           "differs from the call that compiled")


def test_recording_can_be_switched_off(log):
    log.enabled = False
    try:
        torch.ones(2).to("tpu")
    finally:
        log.enabled = True
    assert log.events() == []
    assert tpu_lab.status().simulated


def test_events_between_cells_belong_to_no_cell():
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "tpu_lab")  # follows the cells: nothing else registers
    shell.run_cell("import torch; torch.ones(2, device='tpu').sum().item()", store_history=True)
    cell = shell.execution_count - 1
    assert events.log.events("sync")[-1].cell == cell
    torch.ones(2, device="tpu").sum().item()  # after the cell: e.g. a widget's callback
    assert events.log.events("sync")[-1].cell is None


def test_subscribers_get_each_event_once_with_the_state_of_the_device(log):
    from tpu_lab.bus import BUS
    from tpu_lab.runtime import backend

    got, on_bus = [], []
    unsubscribe = log.subscribe(got.append)
    stop_listening = BUS.subscribe(lambda kind, data: on_bus.append(kind))
    try:
        x = torch.ones(1024, device="cpu").to("tpu")
        with torch.tpu.set_eager_mode(torch.tpu.EagerMode.DEFER_AND_FUSE):
            (x * 2).sum().item()
    finally:
        unsubscribe()
        stop_listening()
    kinds = [s.event.kind for s in got]
    assert kinds == [e.kind for e in log.events()]  # every event once, in order
    assert kinds.count("mode_change") == 2  # on, off: each reached the subscriber once
    assert set(on_bus) <= {"transfer", "sync", "cache_hit", "cache_miss", "mode_change"}
    first = got[0]
    assert first.status.memory.live >= x.nbytes  # the snapshot carries the device's state
    assert first.status is first.status  # read once per snapshot
    assert first.cache == backend().cache_stats()


def test_the_end_of_a_cell_reaches_subscribers_as_a_snapshot_without_an_event(log):
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "tpu_lab")
    got = []
    unsubscribe = log.subscribe(got.append)
    try:
        shell.run_cell("import torch; torch.ones(2, device='tpu').sum().item()")
    finally:
        unsubscribe()
    assert [s.event.kind if s.event else None for s in got] == ["sync", None]
    assert got[-1].status.device_name == tpu_lab.status().device_name


def test_the_log_is_made_on_first_use_and_events_can_be_switched_off():
    import os
    import subprocess
    import sys

    code = (
        "import torch, tpu_lab, tpu_lab.events as events\n"
        "from tpu_lab.bus import BUS\n"
        "print(events._made is None, len(BUS.subscribers))\n"
        "torch.ones(2).to('tpu').cpu()\n"
        "print(events._made is None, len(events.log.events()))\n"
    )
    for env, printed in (("1", "True 1\nFalse 3\n"), ("0", "True 0\nTrue 0\n")):
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
            env={**os.environ, "TPU_LAB_EVENTS": env},
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        assert out.stdout == printed
