"""An :class:`~tpu_lab.estimate.result.Estimate` as a picture: the estimated time, labelled an
estimate of an idealised chip, how it splits between compute, HBM, collectives and launches,
the verdict on HBM, and the ops that dominate (text and HTML from the same facts; the roofline
figure is :func:`tpu_lab.estimate.roofline`)."""

from __future__ import annotations

import textwrap

from ..estimate.result import LABEL, Estimate
from ..hardware.prices import price
from ..units import format_bytes
from .base import View, clip, esc, terminal_width


def seconds_text(s: float) -> str:
    """``0.0123`` -> ``'12.3 ms'``."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if s >= scale:
            return f"{s / scale:.3g} {unit}"
    return f"{s * 1e9:.3g} ns"


def flops_text(n: float) -> str:
    """``2.2e12`` -> ``'2.2 TFLOP'``."""
    for unit, scale in (("PFLOP", 1e15), ("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.0f} FLOP"


def _count(x: float) -> str:
    return f"{x:,.0f}" if x >= 100 else f"{x:.3g}"


def times_text(e: Estimate) -> str:
    """``'expected about 3.46 s (idealised bound 2.08 s)'``."""
    return (f"expected about {seconds_text(e.expected_seconds)} (idealised bound "
            f"{seconds_text(e.seconds)})")


def usd_text(usd: float) -> str:
    """``'$16,103,158'``, ``'$234.50'``, ``'$2.70'``, ``'$0.0042'`` (whole dollars from a
    thousand, cents above a dollar, three figures below)."""
    if usd >= 1000:
        return f"${usd:,.0f}"
    return f"${usd:,.2f}" if usd >= 1 else f"${usd:.3g}"


def cost_text(e: Estimate, commitment: str = "on-demand") -> str:
    """What a run costs at list prices, labelled: ``'list price $0.021 per step on 8 chips
    at $2.70 per chip-hour on demand (us-central1, read 2026-12-06); $0.36 per million
    tokens'``, or why there is none."""
    p = price(e.chip.generation, commitment)
    if not p.known:
        return (f"no published {commitment} price of a TPU {e.chip.generation} chip-hour: set "
                f"one with tpu_lab.hardware.prices.set_price({e.chip.generation!r}, usd)")
    chips = e.chips / e.chip.devices_per_chip
    text = (f"list price (not a quote) {usd_text(e.usd_per_step(commitment))} per step on "
            f"{chips:g} chips at {usd_text(p.usd_per_chip_hour)} per chip-hour {commitment}"
            f"{f' ({p.region}, read {p.read})' if p.read else ''}")
    if e.items:
        per = 1e6 if e.unit == "tokens" else 1
        text += f"; {usd_text(e.usd_per(per, commitment))} per " + (
            "million tokens" if per > 1 else e.unit.rstrip("s"))
    return text


def summary(e: Estimate) -> list[str]:
    """The estimate in a few lines, labelled: what was estimated, then its expected time beside
    the idealised bound, mode, bound and throughput, and (for a model's step) its list price
    (the first lines of every picture of an estimate)."""
    rate = (f"; {_count(e.expected_throughput)} {e.unit}/s on all chips"
            if e.expected_throughput else "")
    lines = [
        f"Estimated TPU time ({LABEL}, not a measurement): {e.title or 'program'}",
        f"{times_text(e)} on {e.chip.product} ({e.mode}), {e.bound}-bound{rate}",
    ]
    return [*lines, cost_text(e)] if e.task else lines


def terms_text(e: Estimate) -> str:
    """The idealised time's terms: ``'MXU 25.7 ms, HBM 35.7 ms, collectives 14.2 ms
    (overlapping the ops), launches 20 µs'`` (the largest is what bounds it)."""
    split = f"MXU {seconds_text(e.compute_seconds)}, HBM {seconds_text(e.memory_seconds)}"
    if e.collective_seconds:
        overlap = "" if e.mode == "eager" else " (overlapping the ops)"
        split += f", collectives {seconds_text(e.collective_seconds)}{overlap}"
    return split + f", launches {seconds_text(e.launch_seconds)}"


def _facts(e: Estimate) -> list[str]:
    per = f" per chip of {e.chips}" if e.chips > 1 else ""
    split = f"time terms: {terms_text(e)}"
    traffic = f"HBM {format_bytes(int(e.hbm_bytes))}"
    if e.ici_bytes:
        traffic += f", ICI {format_bytes(int(e.ici_bytes))} sent"
    if e.dcn_bytes:
        traffic += f", DCN {format_bytes(int(e.dcn_bytes))} sent"
    facts = [
        *summary(e),
        f"{flops_text(e.flops)}{per} (padded to the {e.chip.mxu}x{e.chip.mxu} MXU: "
        f"{flops_text(e.padded_flops)}, waste {e.padding_waste:.1%}); MXU utilisation "
        f"{e.mxu_utilisation:.1%}; {traffic}",
        split,
    ]
    if e.memory is not None:
        facts.append(f"{e.verdict}; at the peak ({e.memory.at}): " + ", ".join(
            f"{kind} {format_bytes(int(n))}" for kind, n in e.memory.breakdown))
    return facts


def line(e: Estimate, top: int = 2) -> str:
    """One line for beside a host time: ``estimated on an idealised TPU v6e chip (not a
    measurement): expected about 2.65 ms (idealised bound 1.82 ms) (memory-bound; MXU 23% of
    the bound, padding waste 4%; top: aten.mm 61%, ...)``."""
    head = f"estimated on {e.idealised_chip} (not a measurement)"
    if not e.ops:
        return f"{head}: no TPU ops ran"
    total = e.seconds or 1.0
    by_name: dict[str, float] = {}
    for o in e.ops:  # one op of several shapes is named once
        by_name[o.name] = by_name.get(o.name, 0.0) + o.seconds
    ranked = sorted(by_name.items(), key=lambda item: -item[1])[:top]
    tops = ", ".join(f"{name} {seconds / total:.0%}" for name, seconds in ranked)
    notes = "".join(f"; note: {n}" for n in e.notes)
    return (f"{head}: {times_text(e)} ({e.bound}-bound; MXU {e.mxu_utilisation:.0%} of the "
            f"bound, padding waste {e.padding_waste:.0%}; top: {tops}){notes}")


_HEAD = ("op", "count", "time", "share", "bound", "FLOPs", "HBM")


def _rows(e: Estimate, top: int) -> list[tuple[str, ...]]:
    total = e.seconds or 1.0
    return [(f"{o.name} {o.shapes}".strip(), str(o.count), seconds_text(o.seconds),
             f"{o.seconds / total:.1%}", o.bound, flops_text(o.flops) if o.flops else "-",
             format_bytes(int(o.hbm_bytes)) if o.hbm_bytes else "-") for o in e.top(top)]


class EstimateView(View):
    """An estimate: its facts, then its ``top`` most expensive ops."""

    def __init__(self, estimate: Estimate, top: int = 8) -> None:
        self.estimate = estimate
        self.top = top

    def to_text(self, width: int | None = None) -> str:
        width = terminal_width(width)
        lines = [w for f in _facts(self.estimate)
                 for w in textwrap.wrap(f, width, subsequent_indent="  ")]
        rows = _rows(self.estimate, self.top)
        name = max([len(_HEAD[0]), *(len(r[0]) for r in rows)])
        name = min(name, max(width - 60, 12))
        lines.append(clip(f"  {_HEAD[0]:<{name}} {_HEAD[1]:>6} {_HEAD[2]:>9} {_HEAD[3]:>6} "
                          f"{_HEAD[4]:<10} {_HEAD[5]:>11} {_HEAD[6]:>10}", width))
        for r in rows:
            lines.append(clip(f"  {clip(r[0], name):<{name}} {r[1]:>6} {r[2]:>9} {r[3]:>6} "
                              f"{r[4]:<10} {r[5]:>11} {r[6]:>10}", width))
        hidden = len(self.estimate.ops) - len(rows)
        if hidden > 0:
            lines.append(f"  ... {hidden} more")
        lines += [w for n in self.estimate.notes
                  for w in textwrap.wrap(f"note: {n}", width, subsequent_indent="  ")]
        return "\n".join(lines)

    def to_html(self) -> str:
        facts = _facts(self.estimate)
        head = "".join(f"<th>{esc(h)}</th>" for h in _HEAD)
        body = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in r) + "</tr>"
                       for r in _rows(self.estimate, self.top))
        notes = "".join(f"<li>{esc(n)}</li>" for n in self.estimate.notes)
        return (f"<div><b>{esc(facts[0])}</b><br>"
                + "<br>".join(esc(f) for f in facts[1:])
                + f"<table><tr>{head}</tr>{body}</table>"
                + (f"<ul style='font-size:smaller'>{notes}</ul>" if notes else "") + "</div>")
