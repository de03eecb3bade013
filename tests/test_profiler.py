"""Profiling: ``%%tpu profile`` through a real IPython shell (timeline, per-op table, trace),
TorchTPU's profiler API (its config string checked against the real package), and
``%tpu parity``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

import tpu_lab
from tpu_lab.events import log
from tpu_lab.profiler import (
    ProfilerActivity,
    Recorder,
    TpuProfilerConfig,
    profile,
    xprof_trace_handler,
)
from tpu_lab.views import view
from tpu_lab.views.estimate import seconds_text

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def shell(use_lowering):
    use_lowering("aten")  # instant torch.compile
    sh = InteractiveShell.instance()
    tpu_lab.load_ipython_extension(sh)
    log.clear()
    names = set(sh.user_ns)
    yield sh
    for name in set(sh.user_ns) - names:
        del sh.user_ns[name]


def _step():
    x = torch.randn(32, 32).to("tpu")
    f = torch.compile(lambda t: t * 2 + 1, backend="tpu", fullgraph=True, dynamic=False)
    y = f((x @ x).relu())
    return y.sum().item(), y.cpu()


def test_recorder_sees_ops_syncs_compiles_and_transfers(use_lowering, fresh_dynamo):
    use_lowering("aten")
    _step()  # warm up the ops' first-call probes
    torch._dynamo.reset()
    with Recorder("step") as rec:
        _step()
    p = rec.profile
    names = [op.name for op in p.ops]
    assert "aten::matmul" in names and "aten::relu" in names
    assert p.count("sync") == 2 and p.count("compile") == 1 and p.count("transfer") >= 2
    assert all(0 <= op.start_us <= p.total_us for op in p.ops)
    assert [s.name for s in p.table()][:1] and sum(s.calls for s in p.table()) == len(p.ops)
    text = view(p).to_text(width=100)
    assert text.startswith("profile of step: ")
    assert "(host time on the simulated device, not TPU time); " in text.splitlines()[0]
    assert "      ops |" in text and "  compile |" in text and "     sync |" in text
    assert "compiled <lambda>" in text
    html = view(p).to_html()
    assert "<svg" in html and "<script" not in html and "aten::matmul" in html
    trace = p.chrome_trace()
    phases = {e["ph"] for e in trace["traceEvents"]}
    assert phases >= {"M", "X", "i"}
    assert trace["otherData"]["clock"] == "host time on the simulated device, not TPU time"


def test_profile_cell_magic_shows_the_timeline_and_writes_a_trace(shell, tmp_path):
    shell.user_ns["torch"] = torch
    trace = tmp_path / "cell.json"
    with capture_output() as cap:
        result = shell.run_cell(
            f"%%tpu profile --top 3 --trace {trace}\n"
            "x = torch.ones(8, 8, device='tpu')\n(x @ x).sum().item()",
            store_history=True,
        )
    assert result.success, result.error_in_exec
    assert result.result == 512.0
    (bundle,) = [o.data for o in cap.outputs if "text/html" in o.data]
    assert bundle["text/plain"].startswith("profile of cell In[")
    assert "<svg" in bundle["text/html"]
    assert len([line for line in bundle["text/plain"].splitlines() if "aten::" in line]) == 3
    assert f"Chrome trace written to {trace}" in cap.stdout
    assert cap.stderr == ""  # Kineto's start/stop lines are kept out of the notebook
    data = json.loads(trace.read_text())
    assert any(e.get("name") == "aten::matmul" for e in data["traceEvents"])
    assert shell.user_ns["_tpu_profile"].count("sync") == 1
    with capture_output() as cap:
        shell.run_line_magic("tpu", "profile --help")
    assert "the profile is kept in the variable _tpu_profile" in " ".join(cap.stdout.split())


def test_profile_magic_usage_errors(shell):
    with pytest.raises(UsageError, match="--trace writes a .json trace, got 'x.txt'"):
        shell.run_cell_magic("tpu", "profile --trace x.txt", "1")
    with pytest.raises(UsageError, match="%tpu profile needs a cell"):
        shell.run_line_magic("tpu", "profile")


def test_torchtpu_profile_api_writes_a_trace_into_the_handlers_folder(tmp_path):
    with pytest.raises(ValueError, match="on_trace_ready must be provided"), profile():
        pass
    handler = xprof_trace_handler(tmp_path / "logs", worker_rank="3")
    with profile(activities=[ProfilerActivity.TPU], on_trace_ready=handler) as prof:
        (torch.ones(4, device="tpu") * 3).sum().item()
    assert prof is None  # as TorchTPU's
    (written,) = (tmp_path / "logs").iterdir()
    assert written.name.endswith("_3.trace.json")
    assert json.loads(written.read_text())["traceEvents"]


def test_tpu_profiler_config_works_with_torch_profiler():
    config = TpuProfilerConfig(run_dir="/tmp/x", worker_rank="1", experimental_options={"a": True})
    assert config.options == (
        "host_tracer_level:2,device_tracer_level:1,python_tracer_level:0,run_dir:/tmp/x,"
        'worker_rank:"1",a:true,check_experimental_options:true'
    )
    with pytest.raises(ValueError, match="cannot clash with stable option: 'run_dir'"):
        TpuProfilerConfig(experimental_options={"run_dir": "x"})
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU], experimental_config=TpuProfilerConfig()
    ) as prof:
        torch.ones(3, device="tpu").sum()
    assert any(e.name == "aten::sum" for e in prof.events())


def test_tpu_profiler_config_string_matches_the_real_package():
    python = os.environ.get("TPU_LAB_TORCHTPU_PYTHON", str(ROOT / ".venv-torchtpu/bin/python"))
    if not Path(python).exists():
        pytest.skip("no torch-tpu environment: run scripts/setup_torchtpu_env.sh")
    kwargs = "run_dir='/r', worker_rank='2', experimental_options={'k': 'a\"b', 'n': 5}"
    code = (
        "import torch_tpu._internal.profiler.profiler_config as c, warnings\n"
        "warnings.simplefilter('ignore')\n"
        f"print(c.TpuProfilerConfig({kwargs}).custom_profiler_config)"
    )
    env = {**os.environ, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}
    real = subprocess.run([python, "-c", code], capture_output=True, text=True, env=env,
                          timeout=300)  # fmt: skip
    assert real.returncode == 0, real.stderr[-2000:]
    ours = eval(f"TpuProfilerConfig({kwargs})")
    assert ours.options == real.stdout.strip()


def test_parity_magic(shell):
    shell.user_ns["model"] = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU())
    shell.user_ns["x"] = torch.randn(2, 4)
    with capture_output() as cap:
        shell.run_line_magic("tpu", "parity model x")
    (bundle,) = [o.data for o in cap.outputs]
    assert bundle["text/plain"].startswith(
        "parity: the bundled (simulated) device vs CPU, 3 modules: bitwise equal"
    )
    with pytest.raises(UsageError, match="no variable named 'nope'"):
        shell.run_line_magic("tpu", "parity model nope")


def test_standin_profiler_module_is_this_one():
    out = subprocess.run(
        [sys.executable, "-c", "import tpu_lab\nfrom torch_tpu._internal import profiler\n"
         "import tpu_lab.profiler as p\nprint(profiler.profile is p.profile)"],
        capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert out.stdout.strip() == "True", out.stderr[-2000:]


def test_torch_tpu_profiler_module_has_torchtpus_public_name():
    from tpu_lab.device.profiler_config import torch_tpu_module

    module = torch_tpu_module()
    assert module.__name__ == "torch.tpu.profiler" and module.__all__ == ["TpuProfilerConfig"]
    assert module.TpuProfilerConfig is TpuProfilerConfig


def test_profile_has_an_estimated_tpu_track_and_a_per_op_table(shell):
    shell.user_ns["torch"] = torch
    shell.run_line_magic("tpu", "use v5e-4")
    try:
        with capture_output() as cap:
            result = shell.run_cell(
                "%%tpu profile\nx = torch.ones(256, 512, device='tpu')\n"
                "w = torch.ones(512, 512, device='tpu')\n(torch.relu(x @ w) + 1).sum().item()",
                store_history=True,
            )
    finally:
        tpu_lab.use_topology("v6e-1")
    assert result.success, result.error_in_exec
    p = shell.user_ns["_tpu_profile"]
    assert p.estimate.chip.name == "v5e" and p.estimate.flops == 2 * 256 * 512 * 512
    assert [s.name for s in p.estimated] == [
        "aten.fill_", "aten.fill_", "aten.mm", "aten.relu", "aten.add", "aten.sum"]
    assert p.estimated[-1].start_us + p.estimated[-1].dur_us == pytest.approx(
        p.estimate.seconds * 1e6)
    (bundle,) = [o.data for o in cap.outputs if "text/html" in o.data]
    lines = view(p).to_text(width=100).splitlines()
    track = next(i for i, line in enumerate(lines) if line.startswith(" est. TPU |"))
    assert lines[track + 2] == (
        "           est. TPU: estimated time on an idealised TPU v5e chip (not a measurement)")
    said = textwrap.wrap(
        "estimated on an idealised TPU v5e chip (not a measurement): expected about "
        f"{seconds_text(p.estimate.expected_seconds)} (idealised bound "
        f"{seconds_text(p.estimate.seconds)}), {p.estimate.bound}-bound", 100,
        initial_indent="  ", subsequent_indent="    ")
    head = lines.index(said[0]) + len(said) - 1
    assert lines[head - len(said) + 1:head + 1] == said
    assert lines[head + 1].split() == [
        "op", "count", "est.", "time", "share", "FLOPs", "HBM", "FLOP/B", "bound"]
    mm = next(line for line in lines[head:] if line.startswith("  aten.mm 256x512 "))
    assert "134 MFLOP" in mm and mm.split()[-2] == f"{2 * 256 * 512 * 512 / (2 << 20):.3g}"
    assert "est. TPU</text>" in bundle["text/html"] and ">FLOP/B</th>" in bundle["text/html"]
    trace = p.chrome_trace()
    estimated = [e for e in trace["traceEvents"] if e.get("pid") == 1 and e["ph"] == "X"]
    assert [e["name"] for e in estimated] == [s.name for s in p.estimated]
