"""Fuzzing every %tpu subcommand's argument string: thousands of lines built from the real
subcommands, options and values mixed with junk. Each one either works or raises IPython's
UsageError (shown without a traceback); nothing else escapes, and a rejected line changes
nothing: eager mode, topology, event log, cluster."""

from __future__ import annotations

import types

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

import tpu_lab
from tpu_lab.errors import SpmdError
from tpu_lab.events import log
from tpu_lab.magics import COMMANDS
from tpu_lab.views import View

hypothesis_settings = settings(
    max_examples=3000,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

OPTIONS = sorted(
    {flag for command in COMMANDS.values() for arg in command.args for flag in arg.flags}
)
VALUES = [
    "v6e-4", "v5e-8", "v4-1", "v9-3", "v6e-0", "v6e--1", "eager", "fuse", "compile", "blocking",
    "0", "1", "-1", "3", "99999999999999999999", "1e3", "nan", "0,1", "-1,1", "uint8", "minmax",
    "t", "cfg", "img", "t.shape", "t.nope", "__class__", "os.system", "import os", "x;y", "'",
    '"', "''", "a b", "--", "-", "=", "--chips=4", "--cell=2", "recompile", "sync", "bfloat16",
    "float64", "out.png", "../up.png", "/etc/passwd", "clip.mp4", "start", "stop", "status",
    "restart", "?", "--help", "-h", "\\", "%tpu", "\t", "é", "🙂",
]  # fmt: skip
WORDS = st.sampled_from([*COMMANDS, *OPTIONS, *VALUES])


def _parts(command) -> st.SearchStrategy[str]:
    """One of the command's own arguments: an option with a value, or a positional value."""
    choices = []
    for arg in command.args:
        values = st.sampled_from(list(arg.options.get("choices") or VALUES))
        if arg.flags[0].startswith("-"):
            if arg.options.get("action") == "store_true":
                choices.append(st.just(arg.flags[0]))
            else:
                choices.append(values.map(lambda v, f=arg.flags[0]: f"{f} {v}"))
        else:
            choices.append(values)
    return st.one_of(choices) if choices else st.just("")


STRUCTURED = st.sampled_from(list(COMMANDS.values())).flatmap(
    lambda c: st.lists(_parts(c), max_size=4).map(lambda parts: " ".join([c.name, *parts]))
)
LINES = st.one_of(
    STRUCTURED,
    STRUCTURED,
    st.lists(WORDS, min_size=0, max_size=6).map(" ".join),
    st.builds(lambda c, rest: f"{c} {rest}", st.sampled_from(list(COMMANDS)), st.text(max_size=30)),
    st.text(max_size=40),
)


class _Shown(View):
    def __init__(self, text: str) -> None:
        self.text = text

    def to_text(self, width=None):
        return self.text

    def to_html(self):
        return "<pre></pre>"


@pytest.fixture
def shell(monkeypatch, tmp_path, use_lowering):
    """A real shell with the real delegates, except those that start processes or threads."""
    use_lowering("aten")
    monkeypatch.chdir(tmp_path)
    from transformers import LlamaConfig

    import tpu_lab.sharding

    started = []
    fake_cluster = types.ModuleType("tpu_lab.launch.cluster")
    fake_cluster.state = None

    def start(topology):
        started.append(topology)
        fake_cluster.state = _Shown(f"cluster {topology}")
        return fake_cluster.state

    def current():  # as tpu_lab.launch.cluster.current: an error until a cluster started
        if fake_cluster.state is None:
            raise SpmdError("No cluster has been started: %tpu cluster start v6e-4.")
        return fake_cluster.state

    def connect(profile=None, cluster_id=None, url_file=None, topology=None):
        fake_cluster.state = _Shown(f"connected {profile or cluster_id or url_file}")
        return fake_cluster.state

    fake_cluster.start, fake_cluster.current = start, current
    fake_connect = types.ModuleType("tpu_lab.launch.connect")
    fake_connect.connect = connect
    fake_cluster.stop = lambda: None  # the stopped cluster stays the current one
    fake_cluster.restart = current
    monkeypatch.setitem(__import__("sys").modules, "tpu_lab.launch.cluster", fake_cluster)
    monkeypatch.setitem(__import__("sys").modules, "tpu_lab.launch.connect", fake_connect)
    fake_dashboard = types.ModuleType("tpu_lab.views.dashboard")
    fake_dashboard.Dashboard = lambda: _Shown("dashboard")
    monkeypatch.setitem(__import__("sys").modules, "tpu_lab.views.dashboard", fake_dashboard)

    sh = InteractiveShell.instance()
    tpu_lab.load_ipython_extension(sh)
    sh.user_ns.update(
        t=torch.rand(3, 8, 8, device="tpu"),
        cfg=LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=4, vocab_size=256),
        img=np.zeros((8, 8, 3), dtype=np.uint8),
    )  # fmt: skip
    sh.fuzz_started = started
    yield sh
    for name in ("t", "cfg", "img"):
        sh.user_ns.pop(name, None)
    torch.tpu.eager_mode = torch.tpu.EagerMode.DEFER_NEVER
    tpu_lab.use_topology("v6e-1")


def _state(sh) -> tuple:
    return (
        torch.tpu.eager_mode,
        tpu_lab.backend().status().topology,
        log.events()[-1].seq if log.events() else 0,
        list(sh.fuzz_started),
        sorted(k for k in sh.user_ns if not k.startswith("_")),
    )


@hypothesis_settings
@given(line=LINES)
def test_any_line_works_or_is_a_usage_error_and_a_rejected_one_changes_nothing(shell, line):
    torch.tpu.eager_mode = torch.tpu.EagerMode.DEFER_NEVER
    tpu_lab.use_topology("v6e-1")
    # IPython expands $name and {expr} before the magic sees the line (as run_line_magic does):
    # "$t" prints the user's "tpu" tensor, a read (and a sync event) of the user's own asking
    line = shell.var_expand(line)
    before = _state(shell)
    try:
        with capture_output():
            shell.find_line_magic("tpu")(line)
    except UsageError as exc:
        assert str(exc).strip(), f"an empty usage error for {line!r}"
        assert "Traceback" not in str(exc)
        assert _state(shell) == before, f"{line!r} was rejected but changed the state"
    except SystemExit as exc:  # argparse's --help exits; the magic must not let that escape
        pytest.fail(f"{line!r} raised SystemExit({exc.code})")


@hypothesis_settings
@given(line=LINES, body=st.sampled_from(["x = 1", "1 / 0", "raise KeyboardInterrupt", ""]))
def test_any_cell_magic_line_restores_the_mode(shell, line, body):
    torch.tpu.eager_mode = torch.tpu.EagerMode.DEFER_NEVER
    tpu_lab.use_topology("v6e-1")
    try:
        with capture_output():
            shell.run_cell_magic("tpu", line, body)
    except (UsageError, ZeroDivisionError, KeyboardInterrupt):
        pass
    if not line.split()[:1] or line.split()[0] not in ("mode", "use", "cluster", "reset"):
        assert torch.tpu.eager_mode == torch.tpu.EagerMode.DEFER_NEVER, line
