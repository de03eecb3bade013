"""A :class:`~tpu_lab.sharding.chooser.Choice` as a picture: the slices that fit, fastest first,
with the expected time of a step beside its idealised bound, the peak HBM of one chip, what
bounds the step and its list price; the Pareto front of time and price marked and drawn
(:func:`figure`, embedded in the HTML). Text and HTML come from the same rows."""

from __future__ import annotations

import base64
import textwrap

from .base import View, clip, esc, terminal_width
from .estimate import seconds_text, usd_text

#: A peak above this share of HBM is marked: XLA's own scratch buffers and fragmentation, which
#: the estimate does not model, may not fit beside it.
TIGHT = 0.9
#: The columns of the table.
HEAD = ("", "slice (chips)", "split", "remat", "expected (bound)", "bound", "peak HBM/chip",
        "$/step", "$ per")


def _per_unit(option) -> tuple[str, str]:
    """(price per million tokens, or per image or clip, the unit)."""
    e = option.estimate
    per = 1e6 if e.unit == "tokens" else 1
    usd = e.usd_per(per, option.commitment)
    unit = "M tokens" if per > 1 else (e.unit or "item").rstrip("s")
    return ("-" if usd is None else usd_text(usd)), unit


def _of(used: float, capacity: int) -> str:
    """``'15.96/32 GiB'``: the peak in the capacity's unit."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if capacity >= scale:
            return f"{used / scale:.2f}/{capacity / scale:g} {unit}"
    return f"{used:.0f}/{capacity} B"


def rows(choice, top: int | None) -> list[tuple[str, ...]]:
    """One row per option that fits, fastest first (``top`` of them; None: all)."""
    front = set(choice.pareto)
    out = []
    for o in choice.options[:top]:
        e = o.estimate
        usd = o.usd_per_step
        per, _ = _per_unit(o)
        out.append((
            "*" if o in front else "", f"{o.slice_name} ({o.chips:g})", o.parallelism, o.remat,
            f"{seconds_text(e.expected_seconds)} ({seconds_text(e.seconds)})", e.bound,
            _of(e.peak_hbm_bytes, e.hbm_capacity) + (
                " !" if e.peak_hbm_bytes > TIGHT * e.hbm_capacity else ""),
            "no price" if usd is None else usd_text(usd),
            per,
        ))
    return out


def _head(choice) -> tuple[str, ...]:
    unit = _per_unit(choice.options[0])[1] if choice.options else "M tokens"
    return (*HEAD[:-1], f"$/{unit}")


def headline(choice) -> list[str]:
    """What was searched and what was found, labelled."""
    lines = [f"Which slice: {choice.title} (estimates, not measurements; list prices, not a "
             "quote)",
             f"{choice.considered} ways considered on {', '.join(choice.generations)} up to "
             f"{choice.max_chips} chips ({choice.estimated} steps estimated); "
             f"{len(choice.options)} fit in HBM; {choice.commitment} prices"]
    if not choice.options:
        lines.append(
            "Nothing fits in HBM: allow more chips (max_chips=), more recomputation "
            "(remat='full'), a smaller batch or shorter sequences, or another generation.")
        return lines
    best, cheapest = choice.best, choice.by_cost[0]
    lines.append(f"fastest: {_short(best)}")
    if cheapest.usd_per_step is not None:
        lines.append(f"cheapest per step: {_short(cheapest)}")
    if choice.tokens and cheapest.usd_per_step is not None:
        runs = [f"{usd_text(choice.usd_per_run(cheapest))} on {cheapest.slice_name} "
                f"({_run_time(choice, cheapest)})"]
        if best is not cheapest:
            runs.append(
                f"{_run_cost(choice, best)} on {best.slice_name} ({_run_time(choice, best)})")
        lines.append(f"a run of {_amount(choice.tokens)} tokens: {', '.join(runs)}")
    return lines


def _amount(n: float) -> str:
    """``1.5e13`` -> ``'15T'``."""
    for word, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g}{word}"
    return f"{n:g}"


def _short(o) -> str:
    usd = o.usd_per_step
    return (f"{o.slice_name} ({o.parallelism}, remat {o.remat}): expected about "
            f"{seconds_text(o.seconds)} a step, {o.estimate.bound}-bound, "
            + ("no published price" if usd is None else f"{usd_text(usd)} a step"))


def _run_time(choice, o) -> str:
    seconds = o.seconds * choice.tokens / o.estimate.items
    if seconds < 360:  # under a tenth of an hour
        return seconds_text(seconds)
    hours = seconds / 3600
    return f"{hours:,.0f} h" if hours >= 10 else f"{hours:.2g} h"


def _run_cost(choice, o) -> str:
    usd = choice.usd_per_run(o)
    return "no published price" if usd is None else usd_text(usd)


FOOT = ("* on the Pareto front: no other option is both faster and cheaper. expected (bound): "
        "a step's expected time, its idealised bound in brackets; bound: what the idealised "
        "chip waits on most. ! within a tenth of HBM: XLA's scratch buffers and fragmentation, "
        "not in the estimate, may not fit beside it.")


class ChoiceView(View):
    """The options of a :class:`~tpu_lab.sharding.chooser.Choice`, ``top`` of them (None: all)."""

    def __init__(self, choice, top: int | None = 15) -> None:
        self.choice = choice
        self.top = top

    def to_text(self, width: int | None = None) -> str:
        width = terminal_width(width)
        lines = [w for h in headline(self.choice)
                 for w in textwrap.wrap(h, width, subsequent_indent="  ",
                                        break_on_hyphens=False)]
        body = rows(self.choice, self.top)
        if body:
            head = _head(self.choice)
            widths = [max(len(h), *(len(r[k]) for r in body)) for k, h in enumerate(head)]
            for r in (head, *body):
                lines.append(clip(" ".join(v.ljust(w) for v, w in zip(
                    r, widths, strict=True)).rstrip(), width))
            hidden = len(self.choice.options) - len(body)
            if hidden > 0:
                lines.append(f"  ... {hidden} more (tpu_lab.view(choice, top=None))")
            lines += textwrap.wrap(FOOT, width, subsequent_indent="  ", break_on_hyphens=False)
        return "\n".join(lines)

    def to_html(self) -> str:
        head = headline(self.choice)
        body = rows(self.choice, self.top)
        table = ""
        if body:
            table = ("<table><tr>" + "".join(f"<th>{esc(h)}</th>" for h in _head(self.choice))
                     + "</tr>"
                     + "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in r) + "</tr>"
                               for r in body) + "</table>"
                     + f"<div style='font-size:smaller'>{esc(FOOT)}</div>")
        picture = ""
        if any(o.usd_per_step is not None for o in self.choice.options):
            png = base64.b64encode(png_of(figure(self.choice))).decode()
            picture = (f"<img alt='expected time and list price per step of each option' "
                       f"src='data:image/png;base64,{png}' style='max-width:640px'>")
        return (f"<div><b>{esc(head[0])}</b><br>" + "<br>".join(esc(h) for h in head[1:])
                + table + picture + "</div>")


def png_of(fig) -> bytes:
    from .memory import figure_png

    return figure_png(fig)


def figure(choice):
    """A matplotlib figure: each priced option at its expected time per step (x) and list
    price per step (y), one colour per generation, the Pareto front joined."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter

    from .palette import SERIES, TEXT

    fig = Figure(figsize=(6.4, 3.8), dpi=100, layout="constrained")
    ax = fig.add_subplot()
    priced = [o for o in choice.options if o.usd_per_step is not None]
    for k, generation in enumerate(choice.generations):
        mine = [o for o in priced if o.generation == generation]
        if mine:
            ax.scatter([o.seconds for o in mine], [o.usd_per_step for o in mine], s=22,
                       color=SERIES[k % len(SERIES)], label=f"TPU {generation}", alpha=0.8)
    front = sorted(choice.pareto, key=lambda o: o.seconds)
    if front:
        ax.plot([o.seconds for o in front], [o.usd_per_step for o in front], color=TEXT,
                linewidth=1, zorder=0, label="Pareto front")
        for o in front:
            ax.annotate(o.slice_name, (o.seconds, o.usd_per_step), textcoords="offset points",
                        xytext=(4, 4), fontsize=7)
    ax.set_xscale("log")
    ax.set_yscale("log")
    plain = FuncFormatter(lambda v, _: f"{v:g}")
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_formatter(plain)
        axis.set_minor_formatter(plain)
    ax.tick_params(which="minor", labelsize=7)
    ax.set_xlabel("expected seconds per step (estimate)")
    ax.set_ylabel(f"USD per step ({choice.commitment} list price)")
    ax.set_title(clip(choice.title, 70), fontsize=9)
    unpriced = sorted({o.generation for o in choice.options} - {o.generation for o in priced})
    if priced:
        ax.legend(fontsize=7, loc="best", title=(
            f"not drawn (no published price): {', '.join(unpriced)}" if unpriced else None),
            title_fontsize=7)
    return fig
