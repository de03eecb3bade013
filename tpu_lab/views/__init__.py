"""Views: every picture renders as text (terminals) and HTML (notebooks, GitHub) from one model.

The data they draw lives elsewhere and stays plain; :func:`view` finds the picture of a data
object (:mod:`.lookup`). One module per picture: the device's status, HBM, the event log and an
explanation, the recompile timeline, the dashboard widget, a preview, a profile, sharding
(:mod:`.sharding`, figures in :mod:`.sharding_figures`: :func:`figure`), which slice
(:mod:`.choice`, and the interactive :class:`SliceWidget` of :mod:`.slice_widget`), the
cluster and an SPMD cell.
"""

from __future__ import annotations

from .base import View
from .events import EventLogView, ExplanationView
from .lookup import view
from .memory import ChipMemory, MemoryView
from .status import StatusView
from .timeline import RecompileTimelineView

__all__ = [
    "ChipMemory",
    "EventLogView",
    "ExplanationView",
    "MemoryView",
    "RecompileTimelineView",
    "StatusView",
    "View",
    "figure",
    "view",
]


def figure(obj, name: str | None = None, estimate=None):
    """A matplotlib figure of ``obj``: a slice chooser's options, by expected time and list
    price (:func:`tpu_lab.views.choice.figure`); else its sharding: a plan's or mesh run's mesh
    and per-chip memory (a plan's with ``estimate``: at its step's estimated peak), a module's
    layout, a tensor's shards (titled ``name``); see
    :func:`tpu_lab.views.sharding_figures.figure`."""
    if any((c.__module__, c.__qualname__) == ("tpu_lab.sharding.chooser", "Choice")
           for c in type(obj).__mro__):
        from .choice import figure as choice_figure

        return choice_figure(obj)
    from .sharding_figures import figure as sharding_figure

    return sharding_figure(obj, name, estimate)


def __getattr__(name: str):
    if name == "SliceWidget":  # anywidget is imported only when the widget is asked for
        from .slice_widget import SliceWidget

        return SliceWidget
    raise AttributeError(f"module 'tpu_lab.views' has no attribute '{name}'")
