"""The messages between the live widgets' Python models and their front ends (widgets/*.js).

Everything a widget shows travels as synced traitlets whose values have the shapes below
(plain JSON): rows computed once in Python, every label, byte count and grouping decided, so
that the front end only draws them.

- The dashboard (widgets/dashboard.js; rows in :mod:`._dashboard_rows`): Python -> JS every
  synced trait; JS -> Python ``eager_mode`` only (the toggle).
- The slice widget (widgets/slice.js; rows in :mod:`._slice_rows`): Python -> JS ``header``,
  ``controls``, ``hbm``, ``result``, ``busy``, ``error``, ``updates``; JS -> Python the traits
  its controls name (``generation``, ``devices``, ``tp``, ``batch``, ``seq``, ``image_size``,
  ``remat``, ``commitment``), which Python validates and sets back when it refuses.

The JSDoc typedefs at the top of each widget's ES module mirror these ``TypedDict``s; change
both together.
"""

from __future__ import annotations

from typing import TypedDict

from ..session import EAGER_MODES
from .palette import KIND_COLORS, KIND_COLORS_DARK


class Header(TypedDict):
    """``header`` trait: what the process runs on."""

    title: str  # the device's name
    subtitle: str  # topology, chips, the chips this process drives
    backend: str


class Gauge(TypedDict):
    """One chip of the topology, in index order. ``driven`` chips belong to this process and
    carry their HBM figures; the others are driven by other processes (one chip per process)."""

    name: str
    tag: str  # "this process" or "other process"
    driven: bool
    meter: bool  # draw live and peak: a driven chip whose backend reports its usage
    live: float  # percent of capacity
    peak: float
    usage: str  # one line: "8.00 GiB / 32.00 GiB, peak 12.00 GiB"
    lines: list[str]  # the same, one fact a line: ["8.00 GiB of 32.00 GiB", "peak 12.00 GiB"]


class Gauges(TypedDict):
    """``gauges`` trait: the chips, laid out like the topology's first axis."""

    columns: int
    chips: list[Gauge]


class Counters(TypedDict):
    """``counters`` trait: the eager compile cache and torch.compile."""

    rate: str  # hits / requests: "75%", or "—" before the first graph
    fill: float  # the same, as a meter's percent
    hit_rate: str  # "75% (3 of 4 graphs)"
    detail: str  # "hit rate · 3 hits, 1 misses of 4 graphs"
    compiles: str  # "1 compile"
    recompiles: str  # "2 recompiles"
    warn: bool  # recompilations happened
    note: str  # what the cache counts in the current eager mode, and what a launch costs


class Row(TypedDict):
    """One row of the feed: an event, or routine events of one kind and place collapsed."""

    seq: int  # the (first) event's number
    kind: str
    label: str  # "cache miss"
    clock: str  # "HH:MM:SS"
    summary: str
    times: str  # "×3" where identical events collapsed, else ""
    where: str
    #: ExplanationView(event).to_html() for recompile and cache_miss events, else "".
    explanation: str
    alert: bool  # a recompile or an out-of-memory error
    why_open: bool  # the explanation starts open (the newest recompile)


class Badge(TypedDict):
    kind: str
    text: str  # "2 cache misses"


class Group(TypedDict):
    """The events of one notebook cell (also those no longer kept, in its counts)."""

    key: str  # stable across updates, for the open/closed state the front end keeps
    title: str  # "In [5]", or "outside a cell"
    total: str  # "40 events"
    badges: list[Badge]
    #: "host 12.3 ms (simulated device) · estimated on an idealised TPU v6e chip (not a
    #: measurement): 45.1 µs (...)"; "" where the cell was not timed
    timing: str
    open: bool  # starts open: the newest cell, and every cell with a notable event
    rows: list[Row]


class Feed(TypedDict):
    """``feed`` trait: the kept events, grouped by cell, newest cell first."""

    shown: str  # "48 shown of 1,024"
    groups: list[Group]


class KindColors(TypedDict):
    light: str
    dark: str


class ModeOption(TypedDict):
    """One entry of the ``modes`` trait: a choice of the eager-mode toggle."""

    value: str  # a torch.tpu.EagerMode name
    label: str
    hint: str


#: The toggle's choices: the session's modes of :data:`tpu_lab.session.MODES`.
#: ``eager_mode`` may also hold another EagerMode name set from code.
MODES: list[ModeOption] = [
    {"value": m.eager_mode, "label": m.label, "hint": m.meaning} for m in EAGER_MODES
]

#: ``palette`` trait: each event kind's colours (:mod:`.palette`).
PALETTE: dict[str, KindColors] = {
    kind: {"light": color, "dark": KIND_COLORS_DARK[kind]} for kind, color in KIND_COLORS.items()
}


# -- the slice widget (widgets/slice.js) ---------------------------------------------------------


class SliceHeader(TypedDict):
    """``header`` trait: what is weighed."""

    title: str  # "Which slice: LlamaForCausalLM train, batch 64 x seq 4096"
    subtitle: str  # "bf16, compiled · estimates of idealised chips, not measurements · ..."


class ControlOption(TypedDict):
    value: str  # the trait's value, as text
    label: str


class Control(TypedDict):
    """One entry of the ``controls`` trait: a control that sets the trait ``name``."""

    name: str  # the trait it sets
    label: str
    kind: str  # "select" or "number"
    numeric: bool  # the trait holds a whole number: send the control's value as a number
    value: str  # the value the widget shows (the last one Python accepted), as text
    options: list[ControlOption]  # a select's choices ([] for a number)
    step: int  # a number's step and least value (0 for a select)
    hint: str  # what it means (the control's tooltip)
    disabled: bool


class HbmSegment(TypedDict):
    """One kind of what fills a chip's HBM at the step's peak."""

    kind: str  # "weights", "optimizer state", ...
    size: str  # "1.87 GiB"
    width: float  # percent of the bar (the bar spans the capacity, or the peak when over)
    color: str  # its colour (tpu_lab.views.sharding.KIND_STYLE)


class Hbm(TypedDict):
    """``hbm`` trait: one chip's HBM at the estimated peak of the step (every chip of the split
    holds the same)."""

    title: str  # "HBM per chip (each of 8 chips)"
    usage: str  # "31.04 GiB of 32.00 GiB (97%)"
    over: bool  # the peak is more than the chip holds
    capacity: float  # percent of the bar where the chip's capacity ends (100 unless over)
    segments: list[HbmSegment]  # in a fixed order of kinds, so colours keep their place
    verdict: str  # "fits in HBM: peak 31.04 GiB of 32.00 GiB per chip (estimate, compiled)"
    fix: str  # where it does not fit: what would ("" where it fits)


class Figure(TypedDict):
    """One headline figure of the ``result`` trait."""

    key: str  # "expected", "bound", "throughput", "step_price", "unit_price"
    label: str  # "expected per step"
    value: str  # "5.23 s"
    note: str  # "idealised bound 3.10 s"


class SliceResult(TypedDict):
    """``result`` trait: the weighed option."""

    title: str  # "v6e-8 (8 chips) · tp 1 x fsdp 8 · remat full"
    figures: list[Figure]
    lines: list[str]  # the same facts as sentences, labelled (what the static view prints)
    priced: bool  # the generation has a published price for the commitment
