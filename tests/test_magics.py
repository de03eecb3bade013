"""The %tpu magics through a real IPython InteractiveShell: every subcommand, cell-scoped modes
restored also when the cell raises, tab completion, usage errors with their exact text."""

from __future__ import annotations

import re
import subprocess
import sys
import types

import pytest
import torch
from IPython.core.completer import provisionalcompleter
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

import tpu_lab
from tpu_lab import session
from tpu_lab.errors import SpmdError, TpuLabError
from tpu_lab.events import log
from tpu_lab.magics import COMMANDS, completions
from tpu_lab.views import View

EagerMode = torch.tpu.EagerMode


@pytest.fixture
def shell(use_lowering):
    use_lowering("aten")  # instant torch.compile
    sh = InteractiveShell.instance()
    tpu_lab.load_ipython_extension(sh)
    torch.tpu.eager_mode = EagerMode.DEFER_NEVER
    log.clear()
    names = set(sh.user_ns)
    yield sh
    for name in set(sh.user_ns) - names:
        del sh.user_ns[name]
    torch.tpu.eager_mode = EagerMode.DEFER_NEVER
    tpu_lab.use_topology("v6e-1")


def _plain(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def run(sh, code: str):
    """Run a cell; returns (stdout, stderr, display bundles, result)."""
    with capture_output() as cap:
        result = sh.run_cell(code, store_history=True)
    return cap.stdout, cap.stderr, [o.data for o in cap.outputs], result


def usage_error(sh, line: str, cell: str | None = None) -> str:
    with pytest.raises(UsageError) as info:
        if cell is None:
            sh.run_line_magic("tpu", line)
        else:
            sh.run_cell_magic("tpu", line, cell)
    return str(info.value)


class Shown(View):
    """What a fake delegate returns: a view that says what it was called with."""

    def __init__(self, text: str) -> None:
        self.text = text

    def to_text(self, width=None):
        return self.text

    def to_html(self):
        return f"<pre>{self.text}</pre>"


# --- loading, help --------------------------------------------------------------------------


def test_load_ext_registers_line_and_cell_magic(shell):
    magics = shell.magics_manager.magics
    assert "tpu" in magics["line"] and "tpu" in magics["cell"]
    shell.run_line_magic("load_ext", "tpu_lab")  # loading twice is harmless
    tpu_lab.load_ipython_extension(shell)


def test_load_ext_and_nothing_else_registers_the_magics():
    code = (
        "from IPython.core.interactiveshell import InteractiveShell\n"
        "sh = InteractiveShell.instance()\n"
        "import tpu_lab\n"
        "print('tpu' in sh.magics_manager.magics['line'])\n"
        "sh.run_line_magic('load_ext', 'tpu_lab')\n"
        "print('tpu' in sh.magics_manager.magics['line'], 'tpu' in sh.magics_manager.magics['cell'])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["False", "True", "True"], out.stderr


def test_help_lists_every_subcommand(shell):
    out, _, _, _ = run(shell, "%tpu --help")
    assert out.startswith("  %tpu [subcommand] [options ...]\n\ntpu_lab: the TPU device")
    for name in COMMANDS:
        assert f"%tpu {name}" in out or f"%%tpu {name}" in out
    assert "  %tpu events [--cell N] [--kind KIND] [--last N]\n" in out
    pinfo, _, _, _ = run(shell, "%tpu?")
    assert "%tpu use [TOPOLOGY] [--generation GENERATION] [--chips N]" in pinfo
    sub, _, _, _ = run(shell, "%tpu events --help")
    assert sub.startswith("usage: %tpu events [--cell N] [--kind KIND] [--last N]\n\nthe event log")


# --- usage errors ---------------------------------------------------------------------------


def test_usage_errors_have_the_fix(shell):
    assert usage_error(shell, "stats") == (
        "%tpu: unknown subcommand 'stats'. Did you mean %tpu status? Subcommands: status, use, "
        "mode, events, explain, recompiles, memory, sharding, plan, cluster, spmd, "
        "preview, time, profile, parity, doctor, reset, dashboard (%tpu --help describes them)."
    )
    # "compiled" is torch.compile on a function, never a cell's or session's mode
    for line in ("compile", "compiled"):
        assert usage_error(shell, line) == (
            f"%tpu: {line!r} is not a subcommand. Compiled code is a function or model under "
            'torch.compile(fn, backend="tpu"), not a mode of a session or a cell; %%tpu mode '
            "fuse runs a cell in DEFER_AND_FUSE (TorchTPU's eager compile cache)."
        )
    assert usage_error(shell, "compile", "x = 1").startswith("%tpu: 'compile' is not a subcommand.")
    assert usage_error(shell, "fuse") == (
        "%tpu: 'fuse' is a mode, not a subcommand: %tpu mode fuse switches the session to it, "
        "%%tpu mode fuse one cell."
    )
    assert usage_error(shell, "events --kind nope") == (
        "%tpu events: argument --kind: invalid choice: 'nope' (choose from 'compile', "
        "'recompile', 'cache_hit', 'cache_miss', 'sync', 'transfer', 'oom', 'mode_change')\n"
        "usage: %tpu events [--cell N] [--kind KIND] [--last N]\n"
        "(%tpu events --help explains every option)"
    )
    assert usage_error(shell, "events --cell x") == (
        "%tpu events: argument --cell: invalid int value: 'x'\n"
        "usage: %tpu events [--cell N] [--kind KIND] [--last N]\n"
        "(%tpu events --help explains every option)"
    )
    assert usage_error(shell, "mode turbo").startswith(
        "%tpu mode: argument mode: invalid choice: 'turbo' (choose from 'eager', 'fuse', "
        "'blocking')\nusage: %tpu mode [eager|fuse|blocking]\n"
    )
    assert usage_error(shell, "mode compile").startswith(
        "%tpu mode: argument mode: invalid choice: 'compile' (choose from 'eager', 'fuse', "
        "'blocking')\n"
    )
    assert usage_error(shell, "status extra") == (
        "%tpu status: unrecognized arguments: extra\nusage: %tpu status [--recent N]\n"
        "(%tpu status --help explains every option)"
    )
    assert usage_error(shell, "events 'unclosed") == (
        "%tpu: cannot read \"events 'unclosed\": No closing quotation; check the quotes."
    )
    assert usage_error(shell, "time") == (
        "%tpu time needs a cell: put %%tpu time on the first line of the cell."
    )
    assert usage_error(shell, "status", "1") == (
        "%%tpu status does not run a cell: write %tpu status on a line of its own. Cell "
        "subcommands: %%tpu mode MODE, %%tpu spmd, %%tpu time, %%tpu profile."
    )
    assert usage_error(shell, "", "1") == (
        "%%tpu needs a subcommand: %%tpu mode MODE, %%tpu spmd, %%tpu time, %%tpu profile."
    )
    assert usage_error(shell, "mode", "1") == (
        "%tpu mode: %%tpu mode needs a mode for the cell\n"
        "usage: %tpu mode [eager|fuse|blocking]\n(%tpu mode --help explains every option)"
    )


def test_a_usage_error_in_a_cell_shows_no_traceback(shell):
    _, err, _, result = run(shell, "%tpu use v9-4")
    assert err == (
        "UsageError: Unknown TPU generation 'v9'. Known generations: v4, v5e, v5p, v6e, v7. "
        "Example: 'v6e-4'.\n"
    )
    assert "Traceback" not in err and result.error_in_exec is not None


# --- status, use, mode ----------------------------------------------------------------------


def test_status_is_the_default(shell):
    torch.ones(4, device="tpu").sum().item()
    for line in ("%tpu", "%tpu status --recent 1"):
        _, _, bundles, _ = run(shell, line)
        (bundle,) = bundles
        assert bundle["text/plain"].startswith("tpu_lab status\n  backend       tpu_lab bundled")
        assert "<b>tpu_lab status</b>" in bundle["text/html"]
    assert "recent events (1)" in bundle["text/plain"]
    assert usage_error(shell, "status --recent -1").startswith(
        "%tpu status: --recent must be 0 or more, got -1\n"
    )


def test_use_a_topology(shell):
    out, _, _, _ = run(shell, "%tpu use v6e-4")
    assert out == "Simulating v6e-4 (4 x TPU v6e, topology 2,2,1).\n"
    out, _, _, _ = run(shell, "%tpu use --generation v5e --chips 8")
    assert out == "Simulating v5e-8 (8 x TPU v5e, topology 2,4,1).\n"
    out, _, _, _ = run(shell, "%tpu use --chips 4")  # the generation stays
    assert out == "Simulating v5e-4 (4 x TPU v5e, topology 2,2,1).\n"
    assert tpu_lab.status().topology == "v5e-4"
    assert usage_error(shell, "use v6e-4 --chips 4") == (
        "Give either a topology name ('v6e-4') or --generation/--chips, not both."
    )
    assert usage_error(shell, "use") == (
        "Name a topology, for example 'v6e-4', or give --generation and/or --chips."
    )
    assert usage_error(shell, "use --generation v6e --chips 3") == (
        "TPU v6e has no 3-device topology on one host; choose one of 1, 4, 8 (for example "
        "'v6e-8'), or a pod slice: v6e-8/2, v6e-16, v6e-32, v6e-64, v6e-128, v6e-256."
    )
    out, _, _, _ = run(shell, "%tpu use v6e-16")  # a pod slice: this process is one of its chips
    assert out == "Simulating v6e-16 (16 x TPU v6e, topology 4,4,1, 4 hosts of 4).\n"


def test_use_is_refused_on_a_real_tpu(shell, monkeypatch):
    from tpu_lab.runtime import select
    from tpu_lab.runtime.torchtpu import TorchTPUBackend

    with monkeypatch.context() as m:
        m.setattr(select, "_active", TorchTPUBackend())
        m.setenv("TPU_ACCELERATOR_TYPE", "v6e-8")
        assert usage_error(shell, "use v6e-4") == (
            "Cannot choose the topology 'v6e-4' on a real TPU: the hardware decides (v6e-8). "
            "Topologies can be chosen on the bundled device only."
        )


def test_mode_for_the_session(shell):
    out, _, _, _ = run(shell, "%tpu mode")
    assert out == (
        "eager mode: DEFER_NEVER (eager); choose with %tpu mode eager|fuse|blocking\n"
    )
    expected = [("fuse", "DEFER_AND_FUSE"), ("fuse", "DEFER_AND_FUSE"),
                ("blocking", "DEFER_NEVER_AND_LAUNCH_BLOCKING"), ("eager", "DEFER_NEVER")]  # fmt: skip
    previous = "DEFER_NEVER"
    for name, member in expected:
        out, _, _, _ = run(shell, f"%tpu mode {name}")
        assert out == f"eager mode: {member} (was {previous})\n"
        assert torch.tpu.eager_mode is EagerMode[member]
        previous = member
    changes = [e.details["new"] for e in log.events("mode_change")]
    assert changes == ["DEFER_AND_FUSE", "DEFER_NEVER_AND_LAUNCH_BLOCKING", "DEFER_NEVER"]


# --- cell-scoped modes ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "inside"), [("mode fuse", "DEFER_AND_FUSE"), ("mode eager", "DEFER_NEVER"),
                         ("mode blocking", "DEFER_NEVER_AND_LAUNCH_BLOCKING")],
)  # fmt: skip
def test_cell_scoped_mode_is_restored(shell, line, inside):
    torch.tpu.eager_mode = EagerMode.DEFER_NEVER if "blocking" in line else (
        EagerMode.DEFER_NEVER_AND_LAUNCH_BLOCKING)  # fmt: skip
    before = torch.tpu.eager_mode
    code = f"%%tpu {line}\nimport torch\nseen = torch.tpu.eager_mode.name\nx = torch.ones(3, device='tpu')\n(x * 2).sum().item()"
    out, _, _, result = run(shell, code)
    assert result.success and result.result == 6.0  # the last expression is the cell's value
    assert shell.user_ns["seen"] == inside
    assert torch.tpu.eager_mode is before


@pytest.mark.parametrize("line", ["mode fuse", "mode blocking", "time"])
def test_cell_scoped_mode_is_restored_when_the_cell_raises(shell, line):
    before = torch.tpu.eager_mode
    _, err, _, result = run(shell, f"%%tpu {line}\nx = 1\nraise KeyError('boom in the cell')")
    assert isinstance(result.error_in_exec, KeyError)
    assert torch.tpu.eager_mode is before
    assert shell.user_ns["x"] == 1


def test_cell_traceback_shows_the_cell_line_not_the_magic(shell):
    with capture_output() as cap:
        shell.run_cell("%%tpu mode fuse\nx = 1\n1 / 0", store_history=True)
    shown = cap.stdout + cap.stderr
    assert "ZeroDivisionError" in shown and "----> 2 1 / 0" in _plain(shown)
    assert "magics/shell.py" not in shown and "skipping hidden" in shown


def test_a_cell_ending_in_a_semicolon_shows_nothing(shell):
    _, _, _, result = run(shell, "%%tpu mode fuse\n1 + 1;")
    assert result.result is None


def test_fuse_cell_uses_the_eager_cache_and_events_carry_the_cell(shell):
    torch.tpu._clear_cache()
    code = "%%tpu mode fuse\nimport torch\nfor n in (3, 4):\n    torch.ones(n, device='tpu').sum().item()"
    _, _, _, result = run(shell, code)
    assert result.success
    misses = log.events("cache_miss")
    assert len(misses) == 2 and {e.cell for e in misses} == {result.execution_count}
    assert session.reset()  # leave the cache empty for the next test


def test_time_cell(shell):
    code = (
        "%%tpu time\nimport torch\nf = torch.compile(lambda x: x + 1, backend='tpu')\n"
        "f(torch.ones(2, device='tpu')).sum().item()"
    )
    torch._dynamo.reset()
    out, _, _, result = run(shell, code)
    assert result.result == 4.0
    assert out.startswith("cell: ") and "(host time on the simulated device)" in out
    assert "in 1 compilation(s)" in out and "1 sync point(s)" in out
    torch._dynamo.reset()


def test_time_cell_shows_the_estimate_for_the_chip_in_use(shell):
    shell.run_line_magic("tpu", "use v5e-4")
    out, _, _, result = run(shell, "%%tpu time\nimport torch\nx = torch.ones(512, 512, "
                                   "device='tpu')\n(x @ x).sum().item()")
    assert result.result == 512.0**3
    host, estimated = out.splitlines()[:2]
    assert "(host time on the simulated device)" in host
    assert re.fullmatch(
        r"cell: estimated on an idealised TPU v5e chip \(not a measurement\): expected about "
        r"[0-9.]+ µs \(idealised bound [0-9.]+ µs\) \((compute|memory|launch)-bound; MXU \d+% "
        r"of the bound, padding waste 0%; top: aten\.mm \d+%, aten\.fill_ \d+%\)", estimated)


# --- the event log --------------------------------------------------------------------------


def _recompile(shell):
    torch._dynamo.reset()
    run(shell, "import torch\nf = torch.compile(lambda x: x * 2, backend='tpu', dynamic=False)")
    _, _, _, result = run(shell, "for n in (3, 4, 5):\n    f(torch.ones(n, device='tpu'))")
    return result.execution_count


def test_events_recompiles_explain(shell):
    cell = _recompile(shell)
    run(shell, "torch.ones(1, device='tpu').item()")
    _, _, (bundle,), _ = run(shell, f"%tpu events --cell {cell} --kind recompile")
    text = bundle["text/plain"]
    assert text.startswith(f"tpu_lab events of kind recompile in cell {cell} (2)\n")
    assert "argument x: dimension 0 changed from 3 to 4" in bundle["text/html"]
    _, _, (bundle,), _ = run(shell, "%tpu events --last 1")
    assert bundle["text/plain"].startswith("tpu_lab events (1)\n") and " sync " in bundle[
        "text/plain"
    ]
    _, _, (bundle,), _ = run(shell, "%tpu recompiles")
    assert bundle["text/plain"].startswith("recompile timeline: 2 recompiles, 1 compile")
    assert "dimension 0 changed from 4 to 5" in bundle["text/html"]
    _, _, (bundle,), _ = run(shell, "%tpu recompiles --plot")
    assert set(bundle) == {"text/plain", "image/png"}
    latest = log.events("recompile")[-1]
    _, _, (bundle,), _ = run(shell, "%tpu explain")
    assert bundle["text/plain"].startswith(f"recompile #{latest.seq}: recompiled <lambda>")
    first = log.events("recompile")[0]
    _, _, (bundle,), _ = run(shell, f"%tpu explain {first.seq}")
    assert "argument x: dimension 0 changed from 3 to 4" in bundle["text/plain"]
    sync = log.events("sync")[-1].seq
    assert usage_error(shell, f"explain {sync}") == (
        f"Event {sync} is a 'sync' event; only recompiles, cache misses and graph breaks "
        "have an explanation. List them with tpu_lab.event_log('recompile') or "
        "tpu_lab.event_log('cache_miss')."
    )
    torch._dynamo.reset()


def test_explain_with_nothing_to_explain(shell):
    assert usage_error(shell, "explain") == (
        "Nothing to explain: no recompilation or graph break has been recorded yet."
    )
    assert usage_error(shell, "explain 999999").startswith("No event #999999 in the log")


def test_reset_says_what_it_resets(shell):
    session.reset()
    with torch.tpu.set_eager_mode(EagerMode.DEFER_AND_FUSE):
        for _ in range(3):
            torch.ones(2, device="tpu").sum().item()
    kept = len(log.events())
    out, _, _, _ = run(shell, "%tpu reset")
    assert out == (
        "Reset:\n"
        "  eager compile cache (DEFER_AND_FUSE's graphs, DEFER_NEVER's ops): 1 compilation(s) "
        "dropped, statistics (3 requests, 2 hits) set to 0\n"
        "  torch.compile: compiled graphs dropped (torch._dynamo.reset()): every compiled "
        "function compiles again on its next call; recompile counts per call site set to 0\n"
        f"  event log: {kept} event(s) cleared\n"
        "  kept: tensors on the device, HBM peak, eager mode, topology\n"
    )
    assert log.events() == [] and tpu_lab.backend().cache_stats() == {
        "requests": 0, "hits": 0, "misses": 0}  # fmt: skip


def test_memory_and_doctor(shell):
    _, _, (bundle,), _ = run(shell, "%tpu memory")
    assert bundle["text/plain"].startswith("HBM per chip (TPU v6e")
    _, _, (bundle,), _ = run(shell, "%tpu memory --plot")
    assert bundle["image/png"]
    out, _, _, _ = run(shell, "%tpu doctor")
    assert out.startswith("tpu-lab doctor\n")


# --- delegates (other modules; replaced here by fakes that record their arguments) ----------


@pytest.fixture
def fakes(monkeypatch):
    calls: list[tuple] = []

    def record(name, result=None):
        def fn(*args, **kwargs):
            calls.append((name, args, kwargs))
            return Shown(f"{name} called") if result is None else result

        return fn

    def plan(*args, **kwargs):
        calls.append(("plan", args, kwargs))
        planned = Shown("plan called")
        planned.estimate = record("estimate", "an estimate")
        return planned

    sharding = types.ModuleType("tpu_lab.sharding")
    sharding.plan = plan
    sharding_views = types.ModuleType("tpu_lab.views.sharding")
    sharding_views.view = record("view")
    cluster = types.ModuleType("tpu_lab.launch.cluster")

    # The contract of tpu_lab.launch.cluster: current() raises until a cluster was started,
    # then returns it, also once stopped; a stopped cluster refuses to run cells.
    class Cluster(Shown):
        stopped = False

        def run_cell(self, source):
            calls.append(("run_cell", (source,), {}))
            if self.stopped:
                raise SpmdError("The cluster is stopped. Start it with %tpu cluster start v6e-4.")
            if "fail" in source:
                raise TpuLabError("rank 1 failed:\nTraceback ...\nValueError: bad")
            return Shown("spmd result")

    cluster.state = None

    def start(topology):
        calls.append(("start", (topology,), {}))
        cluster.state = Cluster(f"cluster {topology}")
        return cluster.state

    def stop():
        calls.append(("stop", (), {}))
        if cluster.state is not None:
            cluster.state.stopped = True

    def current():
        if cluster.state is None:
            raise SpmdError("No cluster has been started: %tpu cluster start v6e-4.")
        return cluster.state

    cluster.start, cluster.stop, cluster.current = start, stop, current
    cluster.restart = record("restart")
    connect = types.ModuleType("tpu_lab.launch.connect")
    connect.connect = record("connect")
    media = types.ModuleType("tpu_lab.media")
    media.preview = record("preview")
    dashboard = types.ModuleType("tpu_lab.views.dashboard")
    dashboard.Dashboard = lambda: calls.append(("Dashboard", (), {})) or Shown("dashboard")
    for module in (sharding, sharding_views, cluster, connect, media, dashboard):
        monkeypatch.setitem(sys.modules, module.__name__, module)
    return calls


def test_sharding_looks_the_variable_up(shell, fakes):
    shell.user_ns["weights"] = weights = torch.ones(2)
    shell.user_ns["model"] = types.SimpleNamespace(layer=types.SimpleNamespace(w=weights))
    _, _, (bundle,), _ = run(shell, "%tpu sharding weights")
    assert bundle["text/plain"] == "view called"
    run(shell, "%tpu sharding model.layer.w")
    assert [c[1][0] is weights for c in fakes] == [True, True]
    assert usage_error(shell, "sharding nothing_here") == (
        "%tpu sharding: no variable named 'nothing_here' in the notebook; run the cell that "
        "defines it first, or check the spelling."
    )
    assert usage_error(shell, "sharding model.layer.v") == (
        "%tpu sharding: model.layer has no attribute 'v'."
    )
    assert usage_error(shell, "sharding weights[0]").startswith(
        "%tpu sharding: 'weights[0]' is not a variable name\n"
    )
    assert len(fakes) == 2  # never evaluated


def test_plan_passes_the_arguments(shell, fakes, tmp_path):
    tpu_lab.use_topology("v5e-8")
    shell.user_ns["config"] = config = object()
    run(shell, "%tpu plan config --chips 4 --generation v6e --batch 2 --seq 128 --dtype bfloat16")
    run(shell, "%tpu plan config")
    run(shell, f"%tpu plan {tmp_path}")
    none = {"image_size": None, "frames": None, "remat": "none", "optimizer": "adamw"}
    assert [c for c in fakes if c[0] == "plan"] == [
        ("plan", (config,), {"chips": 4, "generation": "v6e", "batch": 2, "seq": 128,
                             "dtype": torch.bfloat16, **none}),
        ("plan", (config,), {"chips": 8, "generation": "v5e", "batch": None, "seq": None,
                             "dtype": None, **none}),
        ("plan", (str(tmp_path),), {"chips": 8, "generation": "v5e", "batch": None,
                                    "seq": None, "dtype": None, **none}),
    ]  # fmt: skip


def test_plan_estimates_a_step_when_it_has_one(shell, fakes):
    shell.user_ns["config"] = object()

    def estimates(line):
        fakes.clear()
        run(shell, f"%tpu plan config {line}")
        shown = [c[2]["estimate"] for c in fakes if c[0] == "view"]
        return [c[1] for c in fakes if c[0] == "estimate"], shown

    assert estimates("--batch 2 --seq 8") == ([("forward",)], ["an estimate"])
    assert estimates("--batch 2 --seq 8 --estimate decode") == ([("decode",)], ["an estimate"])
    assert estimates("--image-size 1024x768 --frames 9 --estimate train") == (
        [("train",)], ["an estimate"])
    assert fakes[0][2]["image_size"] == (1024, 768) and fakes[0][2]["frames"] == 9
    assert estimates("--image-size 512")[0] == [("forward",)]
    assert fakes[0][2]["image_size"] == (512, 512)
    assert estimates("--batch 2 --seq 8 --estimate none") == ([], [False])
    assert estimates("") == ([], [False])


def test_plan_estimate_errors(shell, fakes):
    shell.user_ns["config"] = object()
    usage = "usage: %tpu plan MODEL"
    message = usage_error(shell, "plan config --batch 2 --seq 8 --estimate step")
    assert message.startswith(
        "%tpu plan: argument --estimate: invalid choice: 'step' (choose from 'forward', "
        f"'train', 'decode', 'none')\n{usage}"
    )
    assert usage_error(shell, "plan config --estimate train").startswith(
        "%tpu plan: --estimate train needs the work of one step: give --batch and --seq (or "
        f"--image-size for an image model)\n{usage}"
    )
    assert usage_error(shell, "plan config --image-size 10x").startswith(
        "%tpu plan: argument --image-size: '10x' is not an image size: give HEIGHTxWIDTH in "
        f"pixels, e.g. 1024x1024 (or 1024)\n{usage}"
    )
    assert not [c for c in fakes if c[0] == "plan"]


def test_cluster_and_spmd(shell, fakes):
    assert usage_error(shell, "cluster status") == (
        "No cluster has been started: %tpu cluster start v6e-4."
    )
    assert usage_error(shell, "spmd", "x = 1") == (
        "No cluster has been started: %tpu cluster start v6e-4."
    )
    _, _, (bundle,), _ = run(shell, "%tpu cluster start v6e-4")
    assert bundle["text/plain"] == "cluster v6e-4"
    _, _, (bundle,), _ = run(shell, "%tpu cluster")
    assert bundle["text/plain"] == "cluster v6e-4"
    _, _, (bundle,), _ = run(shell, "%%tpu spmd\nx = torch.ones(2)\nx.sum()")
    assert bundle["text/plain"] == "spmd result"
    assert usage_error(shell, "spmd", "fail()") == (
        "rank 1 failed:\nTraceback ...\nValueError: bad"
    )
    run(shell, "%tpu cluster restart")
    out, _, _, _ = run(shell, "%tpu cluster stop")
    assert out == "cluster: stop done\n"
    assert usage_error(shell, "spmd", "x = 2") == (
        "The cluster is stopped. Start it with %tpu cluster start v6e-4."
    )
    tpu_lab.use_topology("v5e-4")
    run(shell, "%tpu cluster start")  # the current topology
    assert usage_error(shell, "cluster stop v6e-4").startswith(
        "%tpu cluster: only start and connect take a topology, not stop\n"
    )
    assert usage_error(shell, "cluster start v6e-4 --profile pod").startswith(
        "%tpu cluster: --profile, --cluster-id and --url-file are for connect\n"
    )
    run(shell, "%tpu cluster connect --profile pod --cluster-id c1")
    assert fakes[-1] == ("connect", (), {"profile": "pod", "cluster_id": "c1", "url_file": None,
                                         "topology": None})  # fmt: skip
    del fakes[-1]
    assert [c[:2] for c in fakes] == [
        ("start", ("v6e-4",)),
        ("run_cell", ("x = torch.ones(2)\nx.sum()\n",)),
        ("run_cell", ("fail()",)),
        ("restart", ()),
        ("stop", ()),
        ("run_cell", ("x = 2",)),
        ("start", ("v5e-4",)),
    ]


def test_preview_passes_the_options(shell, fakes):
    shell.user_ns["image"] = image = torch.zeros(3, 8, 8)
    run(shell, "%tpu preview image")
    run(shell, "%tpu preview image --range -1,1 --fps 12 --save out.mp4")
    run(shell, "%tpu preview image --range uint8")
    run(shell, "%tpu preview image --ran -.5,1")  # an abbreviation, a value starting with "-"
    run(shell, "%tpu preview image --range=-1,1")
    assert fakes == [
        ("preview", (image,), {"value_range": None, "save": None}),
        ("preview", (image,), {"value_range": "-1,1", "save": "out.mp4", "fps": 12}),
        ("preview", (image,), {"value_range": "uint8", "save": None}),
        ("preview", (image,), {"value_range": "-.5,1", "save": None}),
        ("preview", (image,), {"value_range": "-1,1", "save": None}),
    ]
    assert usage_error(shell, "preview image --fps 0").startswith(
        "%tpu preview: --fps must be 1 or more, got 0\n"
    )


def test_dashboard(shell, fakes):
    _, _, (bundle,), _ = run(shell, "%tpu dashboard")
    assert bundle["text/plain"] == "dashboard" and fakes == [("Dashboard", (), {})]


def test_a_missing_delegate_module_is_a_usage_error(shell, monkeypatch):
    monkeypatch.setitem(sys.modules, "tpu_lab.media", None)
    shell.user_ns["image"] = 1
    assert usage_error(shell, "preview image") == (
        "tpu_lab.media is not part of this installation of tpu_lab; upgrade tpu-lab "
        '(pip install -U -e ".").'
    )


# --- completion -----------------------------------------------------------------------------


def test_completion_through_the_shell_completer(shell):
    shell.user_ns["weights"] = 1
    shell.user_ns["_hidden"] = 2

    def complete(line):
        with provisionalcompleter():
            return [c.text for c in shell.Completer.completions(line, len(line))]

    assert complete("%tpu mo") == ["mode"]
    assert complete("%tpu re") == ["recompiles", "reset"]
    assert complete("%%tpu sp") == ["spmd"]
    assert complete("%tpu mode f") == ["fuse"]
    assert complete("%tpu events --k") == ["--kind"]
    assert complete("%tpu events --kind re") == ["recompile"]
    assert complete("%tpu use v6") == ["v6e-1", "v6e-4", "v6e-8"]
    assert complete("%tpu sharding we") == ["weights"]
    assert complete("%tpu cluster st") == ["start", "stop", "status"]
    assert complete("%tpu cluster start v4") == ["v4-1", "v4-2", "v4-4", "v4-8"]


def test_completions_of_a_line():
    assert completions("%tpu ")[:3] == ["status", "use", "mode"]
    assert completions("%tpu events --cell 3 --") == ["--kind", "--last", "--help"]
    assert completions("%tpu plan cfg --chips 4 --") == [
        "--generation", "--batch", "--seq", "--image-size", "--frames", "--dtype", "--estimate",
        "--mode", "--remat", "--optimizer", "--max-batch", "--choose", "--widget", "--max-chips",
        "--commitment", "--tokens", "--help"]  # fmt: skip
    assert completions("%tpu plan ", ["cfg", "_x"]) == ["cfg"]
    assert completions("%tpu plan cfg ", ["cfg"]) == []
    assert completions("%tpu nosuch ") == []
    assert completions("%tpu recompiles --plot ") == []


def test_completions_read_the_line_as_argparse_does():
    assert completions("%tpu events --cell=3 --") == ["--kind", "--last", "--help"]
    assert completions("%tpu events --ki re") == ["recompile"]  # an abbreviation
    assert completions("%tpu events --ki recompile --") == ["--cell", "--last", "--help"]
    assert completions("%tpu cluster status ") == completions("%tpu cluster start ")
    assert completions("%tpu preview img --range -1,1 --", ["img"]) == ["--fps", "--save",
                                                                       "--help"]  # fmt: skip
    assert completions("%tpu preview img --range ", ["img"]) == []  # a value, no choices
    assert completions("%tpu events --cell --") == []  # argparse refuses: --cell needs a value


def test_a_double_dash_where_a_value_goes_is_a_usage_error(shell):
    # argparse hands the second positional [] here, not a string (found by test_magics_fuzz)
    assert usage_error(shell, "parity t -- --").startswith("%tpu parity: '--' is not a value\n")


def test_plan_choose_weighs_every_slice_and_says_what_it_needs(shell):
    from transformers import LlamaConfig

    from tpu_lab.sharding import choose

    llama = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                        num_attention_heads=4, num_key_value_heads=4, vocab_size=256)
    shell.user_ns.update(llama=llama)
    _, _, (bundle,), _ = run(shell, "%tpu plan llama --choose --batch 8 --seq 64 "
                                    "--generation v5e,v6e --max-chips 8 --tokens 1e9")
    found = choose(llama, "train", batch=8, seq=64, generations=("v5e", "v6e"), max_chips=8,
                   tokens=1e9)
    assert bundle["text/plain"] == tpu_lab.view(found).to_text()
    assert "a run of 1B tokens" in bundle["text/plain"]
    assert "<img" in bundle["text/html"] and found.best.slice_name in bundle["text/html"]
    assert usage_error(shell, "plan llama --choose --batch 8").splitlines()[0] == (
        "%tpu plan: --choose weighs one step: give --batch and --seq (or --image-size for an "
        "image model)")
    assert "leave out --chips" in usage_error(shell, "plan llama --choose --chips 4 --batch 8 "
                                                     "--seq 64")
    assert usage_error(shell, "plan llama --chips 4 --max-chips 8").splitlines()[0] == (
        "%tpu plan: --max-chips goes with --choose")
    assert "Unknown TPU generation 'v9'" in usage_error(
        shell, "plan llama --choose --batch 8 --seq 64 --generation v9")


def test_plan_shows_the_estimate_of_its_step(shell):
    from transformers import LlamaConfig

    from tpu_lab.models.shapes import TRANSFORMER_CONFIG
    from tpu_lab.sharding import plan
    from tpu_lab.views.estimate import seconds_text, usd_text

    llama = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=4, vocab_size=256)
    flux = {"_class_name": "FluxTransformer2DModel", **TRANSFORMER_CONFIG}
    shell.user_ns.update(llama=llama, flux=flux)
    label = "Estimated TPU time (estimate of an idealised chip, not a measurement): "
    for line, expected, unit in (
        ("llama --chips 4 --generation v5e --batch 2 --seq 32 --estimate train",
         plan(llama, chips=4, generation="v5e", batch=2, seq=32).estimate("train"), "tokens"),
        ("llama --chips 4 --generation v6e --batch 2 --seq 32",
         plan(llama, chips=4, batch=2, seq=32).estimate("forward"), "tokens"),
        ("flux --chips 1 --generation v6e --image-size 64",
         plan(flux, chips=1, image_size=(64, 64)).estimate("forward"), "images"),
    ):  # fmt: skip
        _, _, (bundle,), _ = run(shell, f"%tpu plan {line}")
        text = " ".join(bundle["text/plain"].split())  # the lines unwrapped
        rate = f"{expected.expected_throughput:,.0f} {unit}/s on all chips"
        assert f"{label}{expected.title}" in text
        assert (f"expected about {seconds_text(expected.expected_seconds)} (idealised bound "
                f"{seconds_text(expected.seconds)}) on {expected.chip.product} (compiled), "
                f"{expected.bound}-bound; {rate}") in text
        assert f"list price (not a quote) {usd_text(expected.usd_per_step())} per step" in text
        assert expected.verdict.startswith("fits in HBM: ") and expected.verdict in text
        assert seconds_text(expected.seconds) in bundle["text/html"]
    _, _, (bundle,), _ = run(shell, "%tpu plan llama --chips 4 --batch 2 --seq 32 --estimate none")
    assert label not in bundle["text/plain"]
    assert usage_error(shell, "plan flux --chips 1 --image-size 64 --estimate decode") == (
        "FluxTransformer2DModel does not decode tokens; estimate 'forward' (one denoising step) "
        "or 'train'."
    )


def test_plan_finds_the_largest_batch_and_refuses_a_bad_step(shell):
    from transformers import LlamaConfig

    shell.user_ns["llama"] = LlamaConfig(hidden_size=64, intermediate_size=128,
                                         num_hidden_layers=2, num_attention_heads=4,
                                         num_key_value_heads=4, vocab_size=256)
    _, _, (bundle,), _ = run(shell, "%tpu plan llama --chips 1 --generation v5e --seq 32 "
                                    "--max-batch --remat full")
    text = bundle["text/plain"]
    assert " ".join(text.split()).startswith(
        "Largest batch that fits in HBM (estimate of an idealised chip, not a measurement): "
        "LlamaForCausalLM train, seq 32")
    lines = text.splitlines()
    assert [line.split()[0] for line in lines if line.startswith("  ")][-2:] == ["remat", "full"]
    assert usage_error(shell, "plan llama --chips 1 --batch 0 --seq 32") == (
        "batch must be a positive whole number, got 0: sequences (or images) per step, e.g. "
        "batch=8.")
    assert usage_error(shell, "plan llama --chips 1 --max-batch").startswith(
        "%tpu plan: --max-batch needs the length of a step: give --seq (or --image-size for an "
        "image model)\n")


def test_plan_widget_opens_the_slice_widget_at_the_given_slice(shell):
    pytest.importorskip("anywidget", reason="the slice widget needs the [lab] extra")
    from transformers import LlamaConfig

    from tpu_lab.views.slice_widget import SliceWidget

    llama = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                        num_attention_heads=4, num_key_value_heads=4, vocab_size=256)
    shell.user_ns.update(llama=llama)
    _, _, (bundle,), _ = run(shell, "%tpu plan llama --widget --batch 8 --seq 64 --generation v5p "
                                    "--chips 4 --remat full --commitment spot")
    expected = SliceWidget(llama, "train", batch=8, seq=64, generation="v5p", devices=4,
                           remat="full", commitment="spot")
    assert "application/vnd.jupyter.widget-view+json" in bundle
    assert bundle["text/plain"] == expected.view().to_text()
    assert "v5p-4 (4 chips) · tp 1 x fsdp 4 · remat full" in bundle["text/plain"]
    # without --generation: the current topology's generation and chips, as %tpu plan takes them
    tpu_lab.use_topology("v5e-8")
    _, _, (bundle,), _ = run(shell, "%tpu plan llama --widget --estimate forward --batch 8 "
                                    "--seq 64")
    assert "v5e-8 (8 chips) · tp 1 x data 8" in bundle["text/plain"]


def test_plan_widget_says_what_it_needs(shell):
    from transformers import LlamaConfig

    llama = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=4, vocab_size=256)
    shell.user_ns.update(llama=llama)
    first = lambda line: usage_error(shell, line).splitlines()[0]  # noqa: E731
    assert first("plan llama --widget --batch 8") == (
        "%tpu plan: --widget weighs one step: give --batch and --seq (or --image-size for an "
        "image model)")
    assert first("plan llama --widget --choose --batch 8 --seq 64") == (
        "%tpu plan: --widget shows one slice at a time with controls, --choose ranks them all: "
        "give one of them")
    assert first("plan llama --widget --batch 8 --seq 64 --tokens 1e9") == (
        "%tpu plan: --widget weighs a step as --choose does (AdamW for training): leave out "
        "--tokens")
    assert first("plan llama --widget --batch 8 --seq 64 --estimate none") == (
        "%tpu plan: --widget needs a task: --estimate forward|train|decode, or leave it out "
        "(train)")
    pytest.importorskip("anywidget", reason="the slice widget needs the [lab] extra")
    assert usage_error(shell, "plan llama --widget --batch 6 --seq 64 --generation v6e "
                              "--chips 16") == (
        "batch must be a positive multiple of the 4 FSDP chips beside tensor parallelism of 4; "
        "got 6, try 4.")
    assert usage_error(shell, "plan llama --widget --estimate forward --remat full --batch 8 "
                              "--seq 64 --generation v6e --chips 4") == (
        "remat 'full' checkpoints a training step's activations; a forward step keeps none: use "
        "'none'.")


def test_explain_covers_a_fullgraph_graph_break_and_a_split_function(shell):
    """After a fullgraph=True graph break, %tpu explain explains the break (not the recompile
    before it); a function compiled without fullgraph that breaks is explained too."""
    torch._dynamo.reset()
    run(shell, "import torch\nf = torch.compile(lambda x: x * 2, backend='tpu', fullgraph=True)\n"
               "f(torch.ones(3, device='tpu')); f(torch.ones(3, 3, device='tpu'))")
    out, err, shown, _ = run(shell, "%tpu explain")
    assert shown, (out, err)
    assert shown[0]["text/plain"].splitlines()[0].endswith(
        "argument x: number of dimensions changed from 1 to 2")
    run(shell, "@torch.compile(backend='tpu', fullgraph=True)\ndef g(x):\n"
               "    if x.sum() > 0:\n        return x + 1\n    return x\n"
               "try:\n    g(torch.ones(3, device='tpu'))\nexcept Exception:\n    pass")
    _, _, shown, _ = run(shell, "%tpu explain")
    text = shown[0]["text/plain"]
    cell = re.search(r"In\[(\d+)\]:3: if x.sum", text)[1]
    assert text.splitlines()[1:] == [
        "  function           g",
        f"  called at          In[{cell}]:7",
        f"  the line           In[{cell}]:3: if x.sum() > 0:",
        "  why it breaks      Python control flow (if/while) on a tensor's value: the branch is "
        "only known",
        "                     when the chip has computed it",
        "  how to fix         compute both sides and choose with torch.where(condition, a, b), "
        "or move the",
        "                     branch out of the compiled function",
        "  cost               fullgraph=True: the call failed, nothing was compiled",
    ]
    run(shell, "@torch.compile(backend='tpu')\ndef h(x):\n    y = x + 1\n"
               "    n = y.sum().item()\n    return y * n\nh(torch.ones(3, device='tpu'))")
    _, _, shown, _ = run(shell, "%tpu explain")
    text = shown[0]["text/plain"]
    assert "  function           h\n" in text and ": n = y.sum().item()" in text
    assert "keep the value a tensor inside the compiled function" in text
    assert "h runs as several graphs with Python between them" in text
    torch._dynamo.reset()


def test_a_mixed_device_error_names_the_cells_tensors_and_the_fix(shell):
    """In a notebook the device's mixed-device error is told for the cell: which name is on
    which device, the move that fixes it; the Trainer's setting only where accelerate is."""
    run(shell, "import torch\nmodel = torch.nn.Linear(4, 2)\nx = torch.ones(1, 4, device='tpu')\n"
               "y = torch.ones(2, device='tpu')  # an earlier value of the name the line assigns")
    _, _, _, result = run(shell, "y = model(x)")
    cell = result.execution_count
    assert str(result.error_in_exec) == (
        "Expected all tensors to be on the same device, but found at least two devices, tpu:0 "
        f"and cpu! In In[{cell}]:1, 'y = model(x)': model (a model) is on cpu, x (a tensor) is "
        "on tpu:0. Move the model to the chip: model.to('tpu') (once, before the call).")
    _, _, _, result = run(shell, "a = torch.ones(3, device='tpu'); b = torch.ones(3)\na + b")
    assert str(result.error_in_exec).endswith(
        "'a + b': a (a tensor) is on tpu:0, b (a tensor) is on cpu. Move b to the chip: "
        "b.to('tpu').")
    _, _, _, result = run(shell, "torch.ones(3, device='tpu') + torch.ones(3)")
    assert str(result.error_in_exec) == (
        "Expected all tensors to be on the same device, but found at least two devices, tpu:0 "
        "and cpu! Move the CPU tensor with .to('tpu') (or the 'tpu' one with .cpu()).")


def test_the_trainers_setting_is_named_only_where_accelerate_is_in_the_traceback():
    from tpu_lab.magics.devices_error import ACCELERATE_FIX, retold

    scope: dict = {}
    exec(compile("def prepare(a, b):\n    return a + b\n", "/site/accelerate/ops.py", "exec"),
         scope)
    with pytest.raises(RuntimeError) as info:
        scope["prepare"](torch.ones(3, device="tpu"), torch.ones(3))
    told = retold(info.value, info.tb)
    assert told.endswith("(or the 'tpu' one with .cpu()). " + ACCELERATE_FIX)
    assert ACCELERATE_FIX.endswith("set ACCELERATE_TORCH_DEVICE=tpu before the Trainer starts.")
    with pytest.raises(RuntimeError) as info:
        torch.ones(3, device="tpu") + torch.ones(3)
    assert "ACCELERATE" not in retold(info.value, info.tb)
    assert retold(ValueError("other"), None) is None
