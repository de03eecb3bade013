"""The slice widget's rows, computed once: every label, byte count, colour and sentence that the
live widget (widgets/slice.js) and the static view (:class:`SliceView`: text and HTML) draw.

The widget's state is its inputs (:class:`SliceInputs`: the generation, the slice, the split,
the step's size, the remat, the commitment) and the :class:`~tpu_lab.sharding.chooser.Option`
that :func:`~tpu_lab.sharding.chooser.weigh` returned for them; :func:`rows` turns them into
what the front end receives (typed in :mod:`._widget_protocol`): the header, the controls, one
chip's HBM bar and the result's figures.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from typing import TypedDict

from ..estimate.result import LABEL
from ..hardware.prices import COMMITMENTS, price
from ..hardware.slices import multi_host
from ..hardware.topology import GENERATIONS
from ..sharding.chooser import TP_DEGREES, Option, slices
from ..units import format_bytes
from ._widget_protocol import (
    Control,
    ControlOption,
    Figure,
    Hbm,
    HbmSegment,
    SliceHeader,
    SliceResult,
)
from .base import View, clip, esc, terminal_width
from .estimate import cost_text, seconds_text, terms_text, times_text, usd_text
from .sharding import KIND_STYLE

#: The sequence lengths offered (the widget's own value is added where it is not one of them).
SEQS = (128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)
#: The square image sizes offered to an image model (likewise).
IMAGE_SIDES = (256, 512, 768, 1024, 1328, 1536, 2048)
#: What each activation checkpointing policy does (tpu_lab.sharding.remat.POLICIES).
REMATS = {
    "none": "none · keep every activation",
    "dots": "dots · keep matmul results",
    "full": "full · recompute each block",
}
#: What each bound means: the term of the idealised time that is the longest.
BOUNDS = {
    "compute": "the MXUs' work is the longest term",
    "memory": "moving bytes between HBM and the chip is the longest term",
    "collective": "the collectives between chips (ICI, DCN) are the longest term",
    "launch": "launching programs is the longest term",
}
_OTHER = ("░", "#fbbf24")  # the colour of a kind KIND_STYLE does not list


class SliceInputs(TypedDict):
    """What the controls set: one way to run the step (see
    :func:`~tpu_lab.sharding.chooser.weigh`). ``seq`` is None for an image model, whose
    ``image_size`` is ``"HxW"`` ("" for a language model)."""

    generation: str
    devices: int
    tp: int
    batch: int
    seq: int | None
    image_size: str
    remat: str
    commitment: str


@dataclass(frozen=True)
class Step:
    """What the widget weighs and keeps: the task, how it runs, the largest slice offered."""

    task: str
    mode: str
    dtype: str  # "bf16"
    max_chips: int
    frames: int | None = None


class SliceRows(TypedDict):
    header: SliceHeader
    controls: list[Control]
    hbm: Hbm
    result: SliceResult


def hosts(generation: str, devices: int) -> int:
    """The hosts of ``generation``'s slice of ``devices`` (the fewest that make it)."""
    if devices in GENERATIONS[generation].topologies:
        return 1
    return min((h for d, h in multi_host(generation) if d == devices), default=1)


def tp_degrees(generation: str, devices: int) -> list[int]:
    """The tensor-parallel degrees tried inside one host of the slice (as choose() tries)."""
    per_host = devices // hosts(generation, devices)
    return [t for t in TP_DEGREES if t <= per_host and devices % t == 0]


def parse_image_size(text: str) -> tuple[int, int] | None:
    """``"1024x1024"`` -> (1024, 1024); None where it is not two positive whole numbers."""
    parts = str(text).lower().replace(" ", "").split("x")
    if len(parts) != 2 or not all(p.isdigit() and int(p) > 0 for p in parts):
        return None
    return int(parts[0]), int(parts[1])


def _rest_name(task: str) -> str:
    return "FSDP" if task == "train" else "data"


def _chips(generation: str, devices: int) -> str:
    per = GENERATIONS[generation].devices_per_chip
    chips = devices // per
    return f"{chips} chip" + ("" if chips == 1 else "s")


def _select(name: str, label: str, value, options: list[tuple[object, str]], hint: str,
            numeric: bool = False, disabled: bool = False) -> Control:
    if not any(str(v) == str(value) for v, _ in options):
        options = [*options, (value, str(value))]
    return {"name": name, "label": label, "kind": "select", "numeric": numeric,
            "value": str(value), "options": [ControlOption(value=str(v), label=text)
                                             for v, text in options],
            "step": 0, "hint": hint, "disabled": disabled}


def controls(inputs: SliceInputs, step: Step) -> list[Control]:
    """The controls, each showing the value in ``inputs``."""
    gen, devices, tp = inputs["generation"], inputs["devices"], inputs["tp"]
    rest = devices // tp
    made = [
        _select("generation", "generation", gen,
                [(g, GENERATIONS[g].chip.product) for g in GENERATIONS],
                "the TPU generation"),
        _select("devices", "slice", devices,
                [(d, f"{gen}-{d} · {_chips(gen, d)}"
                  + (f" · {hosts(gen, d)} hosts" if hosts(gen, d) > 1 else ""))
                 for d in slices(gen, step.max_chips)],
                "the slice: devices as its name counts them (a TPU7x chip is two)",
                numeric=True),
        _select("tp", "tensor parallel", tp,
                [(t, f"{t} · {_rest_name(step.task)} {devices // t}")
                 for t in tp_degrees(gen, devices)],
                "chips that split each layer inside a host; the rest of the slice is "
                + ("FSDP (weights, gradients and optimizer state sharded)" if step.task == "train"
                   else "data-parallel replicas"), numeric=True),
        {"name": "batch", "label": "batch", "kind": "number", "numeric": True,
         "value": str(inputs["batch"]), "options": [], "step": rest,
         "hint": f"the global batch: a multiple of the {rest} {_rest_name(step.task)} chips "
                 f"beside tensor parallelism of {tp}", "disabled": False},
    ]
    if inputs["seq"] is not None:
        made.append(_select("seq", "sequence", inputs["seq"], [(s, f"{s:,}") for s in SEQS],
                            "tokens per sequence", numeric=True))
    else:
        made.append(_select("image_size", "image", inputs["image_size"],
                            [(f"{s}x{s}", f"{s} x {s}") for s in IMAGE_SIDES],
                            "the image's pixels (height x width)"))
    train = step.task == "train"
    made.append(_select("remat", "remat", inputs["remat"], list(REMATS.items()),
                        "activation checkpointing of each block" if train else
                        "activation checkpointing applies to a training step",
                        disabled=not train))
    made.append(_select("commitment", "price", inputs["commitment"],
                        [(c, c) for c in COMMITMENTS], "which list price"))
    return made


def header(inputs: SliceInputs, option: Option, step: Step) -> SliceHeader:
    e = option.estimate
    model = e.title.split(f" {step.task}:")[0]
    what = (f"seq {inputs['seq']:,}" if inputs["seq"] is not None
            else f"image {inputs['image_size']}" + (f" x {step.frames} frames" if step.frames
                                                   else ""))
    return {"title": f"Which slice: {model} {step.task}, batch {inputs['batch']} x {what}",
            "subtitle": f"{step.dtype}, {step.mode} · estimates of idealised chips, not "
                        "measurements · list prices, not quotes"}


def _order(kind: str) -> int:
    kinds = list(KIND_STYLE)
    return kinds.index(kind) if kind in kinds else len(kinds)


def fix(inputs: SliceInputs, option: Option, step: Step) -> str:
    """What would make the step fit, where it does not ("" where it fits)."""
    if option.fits:
        return ""
    gen, devices, tp, batch = (inputs["generation"], inputs["devices"], inputs["tp"],
                               inputs["batch"])
    rest = devices // tp
    tries = []
    if step.task == "train" and inputs["remat"] != "full":
        more = "'dots' or 'full'" if inputs["remat"] == "none" else "'full'"
        tries.append(f"more recomputation (remat {more})")
    larger = [d for d in slices(gen, step.max_chips) if d > devices]
    if step.task == "train" and larger:
        tries.append(f"more chips ({gen}-{larger[0]} or larger: FSDP shares the weights, "
                     "gradients and optimizer state over them)")
    wider = [t for t in tp_degrees(gen, devices) if t > tp]
    if wider:
        tries.append(f"more tensor parallelism (tp {wider[0]}: each chip holds less of each "
                     "layer)")
    if batch > rest:
        tries.append(f"a smaller batch ({max(rest, batch // 2 // rest * rest)})")
    roomier = [g for g, G in GENERATIONS.items()
               if G.hbm_per_device > GENERATIONS[gen].hbm_per_device]
    if roomier:
        tries.append(f"a generation with more HBM per chip ({', '.join(roomier)})")
    tries.append("shorter sequences" if inputs["seq"] is not None else "a smaller image")
    return "To fit, try " + "; or ".join(tries) + "."


def hbm(inputs: SliceInputs, option: Option, step: Step) -> Hbm:
    """One chip's HBM at the step's estimated peak, against its capacity."""
    e = option.estimate
    memory = e.memory
    capacity = e.hbm_capacity
    peak = memory.peak_bytes if memory is not None else 0.0
    scale = max(capacity, peak) or 1
    parts = sorted(memory.breakdown if memory is not None else (), key=lambda kv: _order(kv[0]))
    segments: list[HbmSegment] = [
        {"kind": kind, "size": format_bytes(int(n)), "width": round(100 * n / scale, 2),
         "color": KIND_STYLE.get(kind, _OTHER)[1]}
        for kind, n in parts if n > 0]
    per = GENERATIONS[inputs["generation"]].devices_per_chip
    unit = "chips" if per == 1 else f"devices ({per} a chip)"
    share = 100 * peak / capacity
    pct = f"{share:.0f}%" if share >= 1 or share == 0 else "<1%"
    return {"title": f"HBM of each of the {inputs['devices']} {unit}",
            "usage": f"{format_bytes(int(peak))} of {format_bytes(capacity)} ({pct})",
            "over": not option.fits, "capacity": round(100 * capacity / scale, 2),
            "segments": segments, "verdict": e.verdict, "fix": fix(inputs, option, step)}


def _count(x: float) -> str:
    return f"{x:,.0f}" if x >= 100 else f"{x:.3g}"


def result(inputs: SliceInputs, option: Option, step: Step) -> SliceResult:
    """The weighed option's figures, and the same facts as labelled sentences."""
    e = option.estimate
    commitment = inputs["commitment"]
    chips = _chips(option.generation, option.devices)
    remat = f" · remat {option.remat}" if step.task == "train" else ""
    unit = (e.unit or "items").rstrip("s")
    per_step = e.usd_per_step(commitment)
    p = price(option.generation, commitment)
    per_item = 1e6 if e.unit == "tokens" else 1
    per_unit = e.usd_per(per_item, commitment)
    unit_label = "per million tokens" if per_item > 1 else f"per {unit}"
    unpriced = f"no published {commitment} price of a TPU {option.generation} chip-hour"
    figures: list[Figure] = [
        {"key": "expected", "label": "expected per step",
         "value": seconds_text(e.expected_seconds),
         "note": f"idealised bound {seconds_text(e.seconds)}"},
        {"key": "bound", "label": "what bounds it", "value": f"{e.bound}-bound",
         "note": terms_text(e)},
        {"key": "throughput", "label": f"{e.unit or 'items'} per second",
         "value": _count(e.expected_throughput or 0.0), "note": f"expected, on all {chips}"},
        {"key": "step_price", "label": "list price per step",
         "value": "no price" if per_step is None else usd_text(per_step),
         "note": unpriced if per_step is None else
         f"{commitment}, {usd_text(p.usd_per_chip_hour)} per chip-hour"},
        {"key": "unit_price", "label": f"list price {unit_label}",
         "value": "no price" if per_unit is None else usd_text(per_unit),
         "note": ("no published price" if per_unit is None else
                  "one forward; a denoising pipeline runs one a step" if step.task == "forward"
                  and e.unit in ("images", "clips") else f"{commitment} list price")},
    ]
    lines = [
        f"Estimated ({LABEL}, not a measurement): {e.title}",
        f"{times_text(e)} a step, {e.bound}-bound: {BOUNDS.get(e.bound, e.bound)} "
        f"({terms_text(e)})",
    ]
    if e.expected_throughput:
        lines.append(f"{_count(e.expected_throughput)} {e.unit}/s expected on all {chips}")
    lines.append(cost_text(e, commitment))
    lines += [f"note: {n}" for n in e.notes]
    return {"title": f"{option.slice_name} ({chips}) · {option.parallelism}{remat}",
            "figures": figures, "lines": lines, "priced": per_step is not None}


def rows(inputs: SliceInputs, option: Option, step: Step) -> SliceRows:
    """Everything the widget and its static view draw."""
    return {"header": header(inputs, option, step), "controls": controls(inputs, step),
            "hbm": hbm(inputs, option, step), "result": result(inputs, option, step)}


_SETTINGS = ("batch", "seq", "image_size", "commitment")
_FONT = "font-family:ui-sans-serif,system-ui,sans-serif;font-size:13px"
_MUTED = "color:#6b7280"


class SliceView(View):
    """The slice widget's state as a static picture (text and HTML): what a terminal, a saved
    notebook opened without a kernel, nbviewer and GitHub show."""

    def __init__(self, rows: SliceRows, error: str = "") -> None:
        self.rows = rows
        self.error = error

    def _settings(self) -> str:
        """The controls the result's title does not name (it names the slice, split, remat)."""
        return " · ".join(f"{c['label']} {c['value']}" for c in self.rows["controls"]
                          if c["name"] in _SETTINGS)

    def to_text(self, width: int | None = None) -> str:
        width = terminal_width(width)
        head, h, r = self.rows["header"], self.rows["hbm"], self.rows["result"]
        wrap = lambda text, indent="  ": textwrap.wrap(  # noqa: E731
            text, width, initial_indent=indent, subsequent_indent=indent + "  ")
        lines = [clip(head["title"], width), *wrap(head["subtitle"]), *wrap(self._settings())]
        if self.error:
            lines += wrap(f"refused: {self.error}")
        lines.append(f"  {r['title']}")
        label = max(len(f["label"]) for f in r["figures"])
        for f in r["figures"]:
            lines += wrap(f"{f['label']:<{label}}  {f['value']} ({f['note']})", "    ")
        bar = max(min(width - 40, 40), 10)
        cells, drawn = "", 0
        for s in h["segments"]:
            k = min(round(bar * s["width"] / 100), bar - drawn)
            cells += KIND_STYLE.get(s["kind"], _OTHER)[0] * k
            drawn += k
        edge = min(round(bar * h["capacity"] / 100), bar)
        cells += "·" * (bar - drawn)
        cells = cells[:edge] + "¦" + cells[edge:] if edge < bar else cells  # the capacity
        lines.append(clip(f"  {h['title']}", width))
        lines.append(clip(f"    │{cells}│ {h['usage']}{' OVER' if h['over'] else ''}", width))
        lines += wrap(", ".join(f"{KIND_STYLE.get(s['kind'], _OTHER)[0]} {s['kind']} {s['size']}"
                                for s in h["segments"]) + ", · free", "    ")
        for text in (h["verdict"], h["fix"], *r["lines"]):
            if text:
                lines += wrap(text)
        return "\n".join(lines)

    def to_html(self) -> str:
        head, h, r = self.rows["header"], self.rows["hbm"], self.rows["result"]
        figures = "".join(
            f"<td style='padding:2px 14px 2px 0;vertical-align:top'><div style='{_MUTED};"
            f"font-size:11px'>{esc(f['label'])}</div><div style='font-size:17px;"
            f"font-weight:600'>{esc(f['value'])}</div><div style='{_MUTED};font-size:11px'>"
            f"{esc(f['note'])}</div></td>" for f in r["figures"])
        segments = "".join(
            f"<div title='{esc(s['kind'])}: {esc(s['size'])}' style='width:{s['width']:.2f}%;"
            f"background:{s['color']}'></div>" for s in h["segments"])
        mark = (f"<div title='capacity' style='position:absolute;left:{h['capacity']:.2f}%;"
                "top:-3px;bottom:-3px;width:2px;background:#dc2626'></div>" if h["over"] else "")
        legend = "".join(
            f"<span style='margin-right:10px'><span style='display:inline-block;width:10px;"
            f"height:10px;background:{s['color']}'></span> {esc(s['kind'])} "
            f"{esc(s['size'])}</span>" for s in h["segments"])
        over = (" <b style='color:#dc2626'>OVER</b>" if h["over"] else "")
        fix = (f"<div style='color:#dc2626'>{esc(h['fix'])}</div>" if h["fix"] else "")
        error = (f"<div style='color:#dc2626'>refused: {esc(self.error)}</div>"
                 if self.error else "")
        lines = "".join(f"<li>{esc(line)}</li>" for line in r["lines"])
        return (
            f"<div style='{_FONT};border:1px solid #e5e7eb;border-radius:6px;"
            "padding:8px 12px;max-width:900px'>"
            f"<div><b>{esc(head['title'])}</b></div>"
            f"<div style='{_MUTED};font-size:12px'>{esc(head['subtitle'])} · a snapshot: the "
            "live widget needs a running kernel</div>"
            f"<div style='margin:4px 0;font-size:12px'>{esc(self._settings())}</div>{error}"
            f"<div style='margin-top:6px'><b>{esc(r['title'])}</b></div>"
            f"<table style='border-collapse:collapse'><tr>{figures}</tr></table>"
            f"<div style='margin-top:6px'><b>{esc(h['title'])}</b>: {esc(h['usage'])}{over}</div>"
            "<div style='position:relative;width:420px;max-width:100%;height:14px;"
            f"background:#e5e7eb;display:flex;margin:4px 0'>{segments}{mark}</div>"
            f"<div style='font-size:12px'>{legend}</div>"
            f"<div style='font-size:12px'>{esc(h['verdict'])}</div>{fix}"
            f"<ul style='{_MUTED};font-size:12px;margin:6px 0 0;padding-left:18px'>{lines}</ul>"
            "</div>"
        )
