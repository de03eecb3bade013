"""What the demos share: checking a request's inputs, running it in the mode it asks for, the
report of what the device did meanwhile, and the Gradio parts that show the mode and the report.

The modes are :data:`tpu_lab.controls.MODES`' ``eager``, ``fuse`` (``DEFER_AND_FUSE``) and
``compiled`` (the demo's model under ``torch.compile(backend="tpu")``; each demo compiles its
own).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from html import escape
from typing import Any

from ..controls import COMPILED, EAGER, FUSE, Mode, find_mode, running
from ..errors import DemoInputError, TpuLabError

#: The modes a demo offers (values of :data:`tpu_lab.controls.MODES`).
DEMO_MODES: tuple[Mode, ...] = (EAGER, FUSE, COMPILED)
MAX_SEED = 2**32 - 1
#: Frames per second of a denoising trajectory's video.
FPS = 8
#: Event kinds listed in the report (syncs and transfers are only counted).
SHOWN = ("compile", "recompile", "cache_miss", "mode_change", "oom")
_COUNTED = ("compile", "recompile", "cache_hit", "cache_miss", "sync", "transfer")


def check_mode(value: Any) -> str:
    """``value`` if it is a demo mode's value, else a :class:`DemoInputError` naming them."""
    try:
        return find_mode(value, DEMO_MODES).value
    except TpuLabError as exc:
        raise DemoInputError(str(exc)) from None


def whole(value: Any, name: str, low: int, high: int) -> int:
    """``value`` (a number or its text) as a whole number from ``low`` to ``high``."""
    number = value
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            number = None
    if isinstance(number, float) and number.is_integer():
        number = int(number)
    if isinstance(number, bool) or not isinstance(number, int) or not low <= number <= high:
        raise DemoInputError(f"{name} must be a whole number from {low} to {high}; got {value!r}.")
    return number


def real(value: Any, name: str, low: float, high: float) -> float:
    """``value`` (a number or its text) as a number from ``low`` to ``high``."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = None
    if number is None or isinstance(value, bool) or not low <= number <= high:
        raise DemoInputError(f"{name} must be a number from {low:g} to {high:g}; got {value!r}.")
    return number


@dataclass
class Report:
    """What the device did for one request: events, cache statistics, time."""

    mode: str
    seconds: float
    events: list[dict[str, Any]] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    cache: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "seconds": round(self.seconds, 3),
            "counts": self.counts,
            "cache": self.cache,
            "events": self.events,
        }


def measured(mode: str, work) -> tuple[Any, Report]:
    """``work()`` run in ``mode`` (a demo mode's value): its result and the :class:`Report` of
    its time, events and compile-cache statistics."""
    from ..events import log
    from ..runtime import backend

    seq, cache_before = log.last_seq(), backend().cache_stats()
    start = time.perf_counter()
    with running(mode, DEMO_MODES):
        result = work()
    seconds = time.perf_counter() - start
    events = log.since(seq)
    cache_after = backend().cache_stats()
    report = Report(
        mode=mode,
        seconds=seconds,
        events=[_event_row(e) for e in events if e.kind in SHOWN],
        counts={k: n for k in _COUNTED if (n := sum(e.kind == k for e in events))},
        cache={k: cache_after[k] - cache_before[k] for k in cache_after},
    )
    return result, report


def _event_row(e) -> dict[str, Any]:
    row = {"seq": e.seq, "kind": e.kind, "summary": e.summary}
    for key in ("reason", "changes", "hints", "compile_seconds", "graph_ops"):
        if key in e.details:
            row[key] = e.details[key]
    return row


def report_html(report: Report) -> str:
    """The report as the demos' events panel shows it."""
    counts = ", ".join(f"{n} {k}" for k, n in report.counts.items()) or "no events"
    cache = ", ".join(f"{k} {v}" for k, v in report.cache.items())
    rows = "".join(
        f"<tr><td>{e['seq']}</td><td>{escape(e['kind'])}</td><td>{escape(e['summary'])}"
        + "".join(f"<div>fix: {escape(h)}</div>" for h in e.get("hints", ()))
        + "</td></tr>"
        for e in report.events
    )
    if rows:
        table = f"<table><tr><th>#</th><th>kind</th><th>what happened</th></tr>{rows}</table>"
    elif report.mode == EAGER.value:
        table = "<p>Eager: op by op, nothing compiled.</p>"
    else:
        table = "<p>No compilation in this request: every graph came from the cache.</p>"
    return (
        f"<div class='tpu-lab-events'><p><b>{escape(report.mode)}</b> in "
        f"{report.seconds:.2f} s (host time) &middot; events: {escape(counts)} &middot; "
        f"eager compile cache: {escape(cache)}</p>{table}</div>"
    )


def device_line() -> str:
    """The device the demo runs on, for its heading."""
    from ..runtime import backend

    status = backend().status()
    return status.device_name + (", on the CPU" if status.simulated else "")


def enlarge(image, scale: int):
    """A PIL image ``scale`` times larger, its pixels kept sharp."""
    from PIL import Image

    if scale == 1:
        return image
    return image.resize((image.width * scale, image.height * scale), Image.Resampling.NEAREST)


# --- the Gradio parts every demo shows ---------------------------------------------------------


def mode_input():
    """The mode choice: each mode's label shown, its value sent."""
    import gradio as gr

    return gr.Radio([(m.label, m.value) for m in DEMO_MODES], value=EAGER.value, label="Execution")


def trajectory_output():
    """The denoising trajectory's video."""
    import gradio as gr

    return gr.Video(
        label="Denoising trajectory", elem_id="trajectory", autoplay=True, loop=True, height=320
    )


def report_outputs():
    """The events panel and the request report."""
    import gradio as gr

    return (
        gr.HTML(label="Device events", elem_id="events"),
        gr.JSON(label="Request report", elem_id="report"),
    )
