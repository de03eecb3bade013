"""What the demos share: checking a request's inputs, running it in the mode it asks for (on
this process's chip or on 4 chips), the report of what the device did meanwhile, and the Gradio
parts that show the mode, the chips and the report.

The modes are :data:`tpu_lab.session.MODES`' ``eager``, ``fuse`` (``DEFER_AND_FUSE``) and
``compiled`` (the demo's model under ``torch.compile(backend="tpu")``; each demo compiles its
own).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from html import escape
from typing import Any

from ..errors import DemoInputError, TpuLabError
from ..session import COMPILED, EAGER, FUSE, Mode, cache_note, find_mode, running

#: The modes a demo offers (values of :data:`tpu_lab.session.MODES`).
DEMO_MODES: tuple[Mode, ...] = (EAGER, FUSE, COMPILED)
MAX_SEED = 2**32 - 1
#: The chip counts a demo offers: this process's "tpu" device, or the 4 chips of a simulated
#: v6e-4 (:data:`TP_TOPOLOGY`) with the pipeline's transformer split by tensor parallelism.
CHIPS = (1, 4)
TP_TOPOLOGY = "v6e-4"
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


def check_chips(value: Any) -> int:
    """``value`` as one of :data:`CHIPS`, else a :class:`DemoInputError`."""
    chips = whole(value, "Chips", min(CHIPS), max(CHIPS))
    if chips not in CHIPS:
        raise DemoInputError(f"Chips must be one of {', '.join(map(str, CHIPS))}; got {chips}.")
    return chips


@dataclass
class Report:
    """What the device did for one request: events, cache statistics, time; on 4 chips, what
    each chip held (``chips``: model part -> bytes per chip) and rank 0's events."""

    mode: str
    seconds: float
    events: list[dict[str, Any]] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    cache: dict[str, int] = field(default_factory=dict)
    chips: dict[str, list[int]] = field(default_factory=dict)
    #: The request's estimated TPU time (:mod:`.estimated`), set by the demo after the run.
    estimate: Any = None

    def to_dict(self) -> dict[str, Any]:
        out = {
            "mode": self.mode,
            "seconds": round(self.seconds, 3),
            "counts": self.counts,
            "cache": self.cache,
            "events": self.events,
        }
        if self.chips:
            out["chips"] = self.chips
        if self.estimate is not None:
            out["estimate"] = self.estimate.to_dict()
        return out


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


_CELL = """
import numpy as _np, torch as _torch, torch.distributed as _dist
from tpu_lab.session import running as _running
from {module} import tp_pipeline as _tp_pipeline
if "_tp_demo" not in globals():
    _tp_demo = {{"eager": _tp_pipeline({folder!r})}}
    _tp_demo["eager"].set_progress_bar_config(disable=True)
if {mode!r} == "compiled" and "compiled" not in _tp_demo:
    from tpu_lab.apps.shared import compiled_twin as _compiled_twin
    _tp_demo["compiled"] = _compiled_twin(_tp_demo["eager"])
_pipe = _tp_demo["compiled" if {mode!r} == "compiled" else "eager"]
with _running({mode!r}):
    _out = _pipe(**{kwargs!r}, generator=_torch.Generator().manual_seed({seed})).{output}
if _dist.get_rank() == 0:
    from safetensors.numpy import save_file as _save_file
    _save_file({{"out": _np.ascontiguousarray(_out)}}, {path!r})
from tpu_lab.apps.shared import held_bytes as _held_bytes
_held_bytes(_pipe.transformer, {path!r} + f".rank{{_dist.get_rank()}}")
"""


def compiled_twin(pipe):
    """A pipeline sharing every component of ``pipe`` but the transformer, a copy (sharing the
    parameters) compiled the announcement's way; its progress bar off, as the demos' are."""
    import copy

    transformer = copy.copy(pipe.transformer)
    transformer.compile(backend="tpu", fullgraph=True, dynamic=False)
    twin = type(pipe)(**{**pipe.components, "transformer": transformer})
    twin.set_progress_bar_config(disable=True)
    return twin


def held_bytes(module, path: str) -> None:
    """Write the bytes of ``module``'s parameters and buffers this rank holds to ``path``."""
    from torch.distributed.tensor import DTensor

    tensors = [*module.parameters(), *module.buffers()]
    local = [t.to_local() if isinstance(t, DTensor) else t for t in tensors]
    with open(path, "w") as f:
        f.write(str(sum(t.numel() * t.element_size() for t in local)))


class FourChips:
    """A demo's 4-chip requests: the SPMD cluster (:data:`TP_TOPOLOGY`, one process per chip)
    is started on the first one; each chip then loads the pipeline in ``folder`` once, with
    ``tp_pipeline`` of the model module ``module`` (its transformer loaded by
    ``from_pretrained(..., parallel_config=TensorParallelConfig(tp_degree=4))``), and runs every
    request, rank 0 handing back the result."""

    def __init__(self, module: str, folder) -> None:
        self.module, self.folder = module, str(folder)
        self._cluster = None
        self._files = None

    def run(self, mode: str, kwargs: dict[str, Any], seed: int, output: str):
        """``pipe(**kwargs, generator=seed).output`` on 4 chips in ``mode``: (array, Report)."""
        import tempfile
        from pathlib import Path

        from safetensors.numpy import load_file

        from ..launch import cluster as spmd

        if self._cluster is None:
            self._files = tempfile.TemporaryDirectory(prefix="tpu_lab_chips_")
            self._cluster = spmd.start(TP_TOPOLOGY)
        path = str(Path(self._files.name) / f"out-{time.time_ns()}.safetensors")
        cell = _CELL.format(module=self.module, folder=self.folder, mode=mode, kwargs=kwargs,
                            seed=seed, output=output, path=path)  # fmt: skip
        result = self._cluster.run_cell(cell)
        events = result.events[0]
        report = Report(
            mode=mode,
            seconds=result.seconds,
            events=[{"seq": i, "kind": kind, "summary": summary}
                    for i, (kind, summary) in enumerate(events, 1) if kind in SHOWN],
            counts={k: n for k in _COUNTED if (n := sum(kind == k for kind, _ in events))},
            chips={"transformer": [int(Path(f"{path}.rank{r}").read_text())
                                   for r in range(result.ranks)]},
        )  # fmt: skip
        return load_file(path)["out"], report

    def close(self) -> None:
        if self._cluster is not None:
            from ..launch import cluster as spmd

            spmd.stop()
            self._cluster = None
            self._files.cleanup()


def _event_row(e) -> dict[str, Any]:
    row = {"seq": e.seq, "kind": e.kind, "summary": e.summary}
    for key in ("reason", "changes", "hints", "compile_seconds", "graph_ops"):
        if key in e.details:
            row[key] = e.details[key]
    return row


def report_html(report: Report) -> str:
    """The report as the demos' events panel shows it."""
    counts = ", ".join(f"{n} {k}" for k, n in report.counts.items()) or "no events"
    cache = ", ".join(f"{k} {v}" for k, v in report.cache.items()) or "(on the chips)"
    rows = "".join(
        f"<tr><td>{e['seq']}</td><td>{escape(e['kind'])}</td><td>{escape(e['summary'])}"
        + "".join(f"<div>fix: {escape(h)}</div>" for h in e.get("hints", ()))
        + "</td></tr>"
        for e in report.events
    )
    if rows:
        table = f"<table><tr><th>#</th><th>kind</th><th>what happened</th></tr>{rows}</table>"
    elif report.mode == EAGER.value:
        table = (f"<p>Eager: op by op, no graph of yours compiled. "
                 f"{escape(cache_note(EAGER.eager_mode))}</p>")
    elif report.chips:
        table = "<p>No compilation in this request.</p>"
    else:
        table = "<p>No compilation in this request: every graph came from the cache.</p>"
    estimate = ("" if report.estimate is None else
                f"<p class='tpu-lab-estimate'>{escape(report.estimate.text())}</p>")
    return (
        f"<div class='tpu-lab-events'><p><b>{escape(report.mode)}</b> in "
        f"{report.seconds:.2f} s (host time) &middot; events: {escape(counts)} &middot; "
        f"eager compile cache (this request): {escape(cache)}</p>{estimate}"
        f"{_chips_html(report.chips)}"
        f"{table}</div>"
    )


def _chips_html(chips: dict[str, list[int]]) -> str:
    """What each chip held, for a 4-chip request."""
    if not chips:
        return ""
    from ..units import format_bytes

    held = "; ".join(f"{escape(name)}: " + " / ".join(format_bytes(b) for b in per_chip)
                     for name, per_chip in chips.items())  # fmt: skip
    return (f"<p>On {len(next(iter(chips.values())))} chips ({TP_TOPOLOGY}, tensor parallel): "
            f"each chip held {held}.</p>")  # fmt: skip


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


def chips_input():
    """The chip count: 1, or 4 with the transformer split by tensor parallelism."""
    import gradio as gr

    label = f"Chips (4: tensor parallel on a simulated {TP_TOPOLOGY}, started on first use)"
    return gr.Radio(list(CHIPS), value=1, label=label, elem_id="chips")


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
