"""``%tpu doctor``, ``%tpu reset`` and ``%tpu dashboard``: the environment, a fresh start, and
everything at once."""

from __future__ import annotations

from IPython.display import display

from .parsing import module, shown_as_usage_errors
from .table import subcommand


@subcommand("doctor", "the environment and every misconfiguration with its fix")
def doctor(magics, args, cell):
    from ..doctor import diagnose

    print(diagnose())


@subcommand(
    "reset",
    "clear the event log, torch.compile's graphs (torch._dynamo.reset()) and the eager compile "
    "cache and its statistics",
)
def reset(magics, args, cell):
    from .. import session

    with shown_as_usage_errors():
        done = session.reset()
    print("Reset:\n" + "\n".join(f"  {line}" for line in done))


@subcommand("dashboard", "the live dashboard: HBM gauges, mode toggle, cache, event feed")
def dashboard(magics, args, cell):
    dashboards = module("tpu_lab.views.dashboard")
    with shown_as_usage_errors():
        display(dashboards.Dashboard())
