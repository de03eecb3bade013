"""Views: every picture renders as text (terminals) and HTML (notebooks, GitHub) from one model."""

from .base import View
from .events import EventLogView, ExplanationView

__all__ = ["EventLogView", "ExplanationView", "View"]
