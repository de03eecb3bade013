"""Views: every picture renders as text (terminals) and HTML (notebooks, GitHub) from one model.

The data they draw lives elsewhere and stays plain; :func:`view` finds the picture of a data
object (:mod:`.lookup`). One module per picture: the device's status, HBM, the event log and an
explanation, the recompile timeline, the dashboard widget, a preview, a profile, sharding
(:mod:`.sharding`, figures in :mod:`.sharding_figures`), the cluster and an SPMD cell.
"""

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
    "view",
]
