"""Views: every picture renders as text (terminals) and HTML (notebooks, GitHub) from one model."""

from .base import View
from .events import EventLogView, ExplanationView
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
]
