"""The colours of event kinds, shared by every view that draws events (the event log, the
recompile timeline, the dashboard as HTML and as a widget)."""

from __future__ import annotations

#: Each kind's colour on a light background.
KIND_COLORS = {
    "compile": "#2563eb",
    "recompile": "#dc2626",
    "cache_hit": "#16a34a",
    "cache_miss": "#ea580c",
    "sync": "#7c3aed",
    "transfer": "#0891b2",
    "oom": "#b91c1c",
    "mode_change": "#4b5563",
}

#: Each kind's colour on a dark background (the widget in a dark theme): lighter shades.
KIND_COLORS_DARK = {
    "compile": "#60a5fa",
    "recompile": "#f87171",
    "cache_hit": "#4ade80",
    "cache_miss": "#fb923c",
    "sync": "#a78bfa",
    "transfer": "#22d3ee",
    "oom": "#f87171",
    "mode_change": "#9ca3af",
}

#: The colour of text about no kind in particular.
TEXT = "#111827"

#: Colours for series told apart by colour alone (a figure's TPU generations, in order).
SERIES = ("#2563eb", "#ea580c", "#16a34a", "#7c3aed", "#0891b2", "#b91c1c")
