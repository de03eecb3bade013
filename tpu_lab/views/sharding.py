"""Pictures of sharding, as text and HTML from the same data: a tensor's shards on the mesh
(any rank), a model's placement table sorted by bytes, per-chip HBM bars against capacity, a
plan and a run on the one-process mesh (their figures: :mod:`.sharding_figures`)."""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass

import torch

from ..errors import ShardingError
from ..sharding.info import (
    ModelLayout,
    ShardingInfo,
    TensorLayout,
    dtype_name,
    format_box,
    model_layout,
    sharding_info,
)
from ..sharding.mesh import MeshRun
from ..sharding.plan import Plan
from ..units import format_bytes
from .base import View, clip, esc, terminal_width

#: One colour per chip in HTML (cycled past 10 chips); cells held by several chips are grey.
CHIP_COLORS = ("#93c5fd", "#fca5a5", "#86efac", "#fcd34d", "#c4b5fd", "#f9a8d4", "#5eead4",
               "#fdba74", "#a5b4fc", "#bef264")
_STYLE = ("font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:12px;"
          "border-collapse:collapse")
_TD = "padding:2px 6px"


def _shape(shape) -> str:
    return " x ".join(map(str, shape)) if shape else "scalar"


def _chips_label(chips: list[int], total: int) -> str:
    if len(chips) == total and total > 1:
        return f"all {total} chips"
    if len(chips) > 2 and chips == list(range(chips[0], chips[-1] + 1)):
        return f"chips {chips[0]}-{chips[-1]}"
    return ("chip " if len(chips) == 1 else "chips ") + ",".join(map(str, chips))


def _mesh_text(info: ShardingInfo) -> str:
    return " x ".join(f"{n}={s}" for n, s in zip(info.mesh_axis_names, info.mesh_shape,
                                                 strict=True))


def picture_dims(info: ShardingInfo) -> tuple[int, ...]:
    """The (at most two) tensor dims the block picture draws: the sharded ones first."""
    if info.ndim <= 2:
        return tuple(range(info.ndim))
    dims = list(info.sharded_dims[:2])
    for d in sorted(range(info.ndim), key=lambda d: -info.global_shape[d]):
        if len(dims) < 2 and d not in dims:
            dims.append(d)
    return tuple(sorted(dims))


def blocks(info: ShardingInfo) -> tuple[tuple[int, ...], list, list, list[list[list[int]]]]:
    """The block picture: (dims, row cuts, column cuts, chips holding each cell)."""
    dims = picture_dims(info)
    cuts = []
    for d in dims:
        edges = {0, info.global_shape[d]}
        for boxes in info.slices:
            for box in boxes:
                edges |= {box[d].start, box[d].stop}
        e = sorted(edges)
        cuts.append(list(zip(e[:-1], e[1:], strict=True)))
    rows = cuts[0] if len(dims) == 2 else [(0, 1)]
    cols = cuts[-1] if dims else [(0, 1)]
    cells = []
    for r0, r1 in rows:
        line = []
        for c0, c1 in cols:
            holders = []
            for chip, boxes in enumerate(info.slices):
                for box in boxes:
                    ok_r = len(dims) < 2 or (box[dims[0]].start <= r0 and r1 <= box[dims[0]].stop)
                    ok_c = not dims or (box[dims[-1]].start <= c0 and c1 <= box[dims[-1]].stop)
                    if ok_r and ok_c:
                        holders.append(chip)
                        break
            line.append(holders)
        cells.append(line)
    return dims, rows, cols, cells


class ShardingView(View):
    """A tensor's shards on the mesh: per-chip slice table and a block picture of two dims."""

    def __init__(self, info: ShardingInfo, name: str | None = None) -> None:
        self.info = info
        self.name = name or "tensor"

    def _head(self) -> str:
        i = self.info
        return (f"{self.name}: {dtype_name(i.dtype)}[{', '.join(map(str, i.global_shape))}] "
                f"on mesh {_mesh_text(i)}, {', '.join(i.placements)}; "
                f"{format_bytes(i.global_bytes)} in all")

    def _caption(self, dims) -> str:
        i = self.info
        if not dims:
            return "scalar: every chip holds it"
        names = [f"dim {d} ({i.global_shape[d]})" for d in dims]
        text = "picture: " + (" rows x ".join(names) + " columns" if len(dims) == 2
                              else names[0] + " left to right")
        hidden = [d for d in range(i.ndim) if d not in dims]
        split = [d for d in hidden if d in i.sharded_dims]
        if hidden:
            text += f"; not drawn: dim {', '.join(map(str, hidden))}"
            text += f" (split too: {', '.join(map(str, split))})" if split else " (whole)"
        return text

    def to_text(self, width: int | None = None) -> str:
        width = terminal_width(width)
        i = self.info
        lines = [clip(self._head(), width), "  chip  mesh      local shape   bytes       slices"]
        for chip in range(i.chips):
            coord = ",".join(map(str, i.coordinate(chip)))
            row = (f"  {chip:>4}  ({coord}){'':<{max(7 - len(coord), 0)}} "
                   f"{_shape(i.local_shape(chip)):<13} {format_bytes(i.bytes_per_chip[chip]):<11} "
                   + " ".join(format_box(b) for b in i.slices[chip]))
            lines.append(clip(row, width))
        dims, rows, cols, cells = blocks(i)
        lines.append(clip(self._caption(dims), width))
        lines += _grid_text(i, dims, rows, cols, cells, width)
        return "\n".join(lines)

    def to_html(self) -> str:
        i = self.info
        body = "".join(
            f"<tr><td style='{_TD}'>{chip}</td><td style='{_TD}'>"
            f"({esc(','.join(map(str, i.coordinate(chip))))})</td>"
            f"<td style='{_TD}'>{esc(_shape(i.local_shape(chip)))}</td>"
            f"<td style='{_TD}'>{esc(format_bytes(i.bytes_per_chip[chip]))}</td>"
            f"<td style='{_TD}'>{esc(' '.join(format_box(b) for b in i.slices[chip]))}</td></tr>"
            for chip in range(i.chips)
        )
        dims, rows, cols, cells = blocks(i)
        return (
            f"<div><b>{esc(self._head())}</b><table style='{_STYLE}'><thead><tr>"
            + "".join(f"<th style='{_TD};text-align:left'>{h}</th>"
                      for h in ("chip", "mesh", "local shape", "bytes", "slices"))
            + f"</tr></thead><tbody>{body}</tbody></table>"
            f"<div style='color:#6b7280;margin:4px 0'>{esc(self._caption(dims))}</div>"
            + _grid_html(i, rows, cols, cells) + "</div>"
        )


def _grid_text(info, dims, rows, cols, cells, width) -> list[str]:
    room = max(min(width - 16, 72), 8)
    total = sum(c1 - c0 for c0, c1 in cols) or 1
    labels = [[_chips_label(h, info.chips) for h in line] for line in cells]
    widths = []
    for j, (c0, c1) in enumerate(cols):
        need = max(len(labels[r][j]) for r in range(len(rows))) + 2
        widths.append(max(need, round(room * (c1 - c0) / total)))
    out = ["┌" + "┬".join("─" * w for w in widths) + "┐"]
    shown = rows if len(rows) <= 32 else rows[:31]
    for r, (r0, r1) in enumerate(shown):
        cells_text = "│".join(f" {labels[r][j]:<{w - 1}}" for j, w in enumerate(widths))
        tag = f" {r0}:{r1}" if len(dims) == 2 else ""
        out.append(f"│{cells_text}│{tag}")
        out.append(("├" + "┼".join("─" * w for w in widths) + "┤") if r < len(shown) - 1
                   else "└" + "┴".join("─" * w for w in widths) + "┘")
    if len(shown) < len(rows):
        out.append(f"… {len(rows) - len(shown)} more row blocks")
    if len(cols) > 1:
        out.append(" " + "  ".join(f"{f'{c0}:{c1}':<{w - 1}}" for (c0, c1), w in
                                   zip(cols, widths, strict=True)))
    return [clip(line.rstrip(), width) for line in out]


def _grid_html(info, rows, cols, cells) -> str:
    total = sum(c1 - c0 for c0, c1 in cols) or 1
    trs = []
    for r, (r0, r1) in enumerate(rows):
        tds = []
        for j, (c0, c1) in enumerate(cols):
            holders = cells[r][j]
            color = CHIP_COLORS[holders[0] % len(CHIP_COLORS)] if len(holders) == 1 else "#e5e7eb"
            tds.append(
                f"<td title='{esc(f'[{r0}:{r1}, {c0}:{c1}]')}' style='background:{color};"
                f"width:{100 * (c1 - c0) / total:.1f}%;border:1px solid #fff;padding:4px;"
                f"text-align:center'>{esc(_chips_label(holders, info.chips))}</td>"
            )
        trs.append("<tr>" + "".join(tds) + "</tr>")
    return f"<table style='{_STYLE};width:480px;table-layout:fixed'>{''.join(trs)}</table>"


def _per_chip(values) -> str:
    lo, hi = min(values), max(values)
    return format_bytes(lo) if lo == hi else f"{format_bytes(lo)}-{format_bytes(hi)}"


def natural_key(name: str) -> tuple:
    """Sorts ``layers.2`` before ``layers.10``: the digits of a name compare as numbers."""
    return tuple((0, int(t), "") if t.isdigit() else (1, 0, t) for t in re.split(r"(\d+)", name))


_INDEX = re.compile(r"(?<=\.)\d+(?=\.)")


def _ranges(numbers: list[int]) -> str:
    """``0-31`` or ``0-2,4``."""
    spans: list[list[int]] = []
    for n in sorted(numbers):
        if spans and n == spans[-1][1] + 1:
            spans[-1][1] = n
        else:
            spans.append([n, n])
    return ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in spans)


@dataclass(frozen=True)
class _Row:
    """One line of the table: a tensor, or the same tensor of several layers
    (``model.layers.{0-31}.mlp.down_proj.weight``)."""

    name: str
    entries: tuple[TensorLayout, ...]

    @property
    def first(self) -> TensorLayout:
        return self.entries[0]

    @property
    def bytes(self) -> int:
        """The bytes one of its tensors holds on the fullest chip."""
        return max(self.first.info.bytes_per_chip)


def table_rows(layout: ModelLayout) -> list[_Row]:
    """The table's rows, largest tensors first, names in natural order: a tensor repeated in
    every layer with the same shape, placement and style is one row with its layers' numbers
    (so a 32-layer model's attention weights are not pushed out by 96 MLP weights)."""
    groups: dict[tuple, list[tuple[int, TensorLayout]]] = {}
    for e in layout.entries:
        index = _INDEX.search(e.name)
        pattern = e.name if index is None else e.name[: index.start()] + "{}" + e.name[index.end():]
        key = (pattern, e.info.global_shape, e.info.dtype, e.placement, e.style,
               e.info.bytes_per_chip)
        groups.setdefault(key, []).append((int(index.group()) if index else -1, e))
    rows = []
    for (pattern, *_), members in groups.items():
        members.sort(key=lambda m: m[0])
        if len(members) == 1:
            rows.append(_Row(members[0][1].name, (members[0][1],)))
        else:
            numbers = _ranges([n for n, _ in members])
            rows.append(_Row(pattern.replace("{}", "{" + numbers + "}"),
                             tuple(e for _, e in members)))
    return sorted(rows, key=lambda r: (-r.bytes, natural_key(r.first.name)))


class LayoutView(View):
    """Every parameter and buffer of a model: placement and bytes per chip, heaviest first,
    names in natural order, a tensor of every layer on one row (:func:`table_rows`); a column
    no tensor fills (no plan style) is left out, and a name is never cut (one too long for a
    narrow terminal gets a line of its own)."""

    def __init__(self, layout: ModelLayout, limit: int = 25, title: str | None = None) -> None:
        self.layout = layout
        self.limit = limit
        self.title = title

    def _head(self) -> str:
        lay = self.layout
        mesh = " x ".join(f"{n}={s}" for n, s in zip(lay.mesh_axis_names, lay.mesh_shape,
                                                    strict=True))
        return (self.title or f"{lay.model} on {lay.chips} chip{'s' * (lay.chips != 1)} "
                f"(mesh {mesh})") + (f": {len(lay.entries)} tensors, "
                                     f"{format_bytes(lay.global_bytes)} unsharded, "
                                     f"{_per_chip(lay.bytes_per_chip)} per chip")

    def _styled(self) -> bool:
        return any(e.style for e in self.layout.entries)

    def _heads(self) -> tuple[str, ...]:
        heads = ("tensor", "shape", "dtype", "placement", "style", "per chip")
        return heads if self._styled() else tuple(h for h in heads if h != "style")

    def _rows(self):
        for row in table_rows(self.layout)[: self.limit]:
            e = row.first
            count = f"{len(row.entries)} x " if len(row.entries) > 1 else ""
            values = (row.name + (f" (= {', '.join(e.aliases)})" if e.aliases else ""),
                      _shape(e.info.global_shape), dtype_name(e.info.dtype), e.placement,
                      e.style or "", count + _per_chip(e.info.bytes_per_chip))
            yield values if self._styled() else values[:4] + values[5:]

    def _rest(self) -> str | None:
        rest = [e for row in table_rows(self.layout)[self.limit:] for e in row.entries]
        if not rest:
            return None
        per = [sum(e.info.bytes_per_chip[c] for e in rest) for c in range(self.layout.chips)]
        return f"… {len(rest)} more tensors, {_per_chip(per)} per chip"

    def to_text(self, width: int | None = None) -> str:
        width = terminal_width(width)
        rows = list(self._rows())
        heads = self._heads()[1:]
        cols = [max([len(h)] + [len(r[k + 1]) for r in rows]) for k, h in enumerate(heads)]
        name_w = max(min(max([6] + [len(r[0]) for r in rows]), width - sum(cols) - 7), 12)
        widths = (name_w, *cols)
        aligns = "<><<" + "<" * (len(heads) - 4) + ">"

        def fmt(values) -> str:
            return "  " + " ".join(f"{v:{a}{w}}" for v, a, w in zip(values, aligns, widths,
                                                                       strict=True))

        lines = [*_wrap([self._head()], width), fmt(("tensor", *heads)).rstrip()]
        for r in rows:  # a name too long for its column gets a line of its own, never cut
            if len(r[0]) > name_w:
                lines.append(f"  {r[0]}")
            lines.append(fmt(("" if len(r[0]) > name_w else r[0], *r[1:])).rstrip())
        if (rest := self._rest()) is not None:
            lines.append("  " + rest)
        return "\n".join(clip(line, width) for line in lines)

    def to_html(self) -> str:
        heads = self._heads()
        last = len(heads) - 1
        body = "".join(
            "<tr style='border-top:1px solid #e5e7eb'>"
            + "".join(f"<td style='{_TD}{';text-align:right' * (k == last)}'>{esc(v)}</td>"
                      for k, v in enumerate(r)) + "</tr>"
            for r in self._rows()
        )
        rest = self._rest()
        if rest is not None:
            body += (f"<tr><td colspan='{len(heads)}' style='{_TD};color:#6b7280'>{esc(rest)}"
                     "</td></tr>")
        return (f"<div><b>{esc(self._head())}</b><table style='{_STYLE}'><thead><tr>"
                + "".join(f"<th style='{_TD};text-align:left'>{h}</th>" for h in heads)
                + f"</tr></thead><tbody>{body}</tbody></table></div>")


#: How each kind of HBM content is drawn: a text glyph, an HTML colour (see
#: :data:`tpu_lab.estimate.memory.KINDS`); what is not listed is drawn as "other".
KIND_STYLE = {
    "weights": ("█", "#1d4ed8"),
    "gathered weights (FSDP)": ("▇", "#60a5fa"),
    "gradients": ("▓", "#7c3aed"),
    "optimizer state": ("▒", "#c026d3"),
    "activations saved for backward": ("▚", "#ea580c"),
    "KV cache": ("≡", "#059669"),
    "temporaries": ("░", "#fbbf24"),
    "inputs": ("▪", "#a3a3a3"),
}
_OTHER = ("░", "#fbbf24")


class PlanMemoryView(View):
    """Per-chip HBM bars against capacity, each bar split by what fills it: ``parts[chip]``
    is ((kind, bytes), ...) on that chip (a plan's weights alone, or what holds HBM at its
    step's estimated peak; a mesh run's real shards)."""

    def __init__(self, parts, capacity: int, title: str, chips_per_host: int | None = None,
                 note: str = "") -> None:
        self.parts = tuple(tuple(p) for p in parts)
        self.capacity = capacity
        self.title = title
        self.chips_per_host = chips_per_host  # set for several hosts: bars grouped by host
        self.note = note

    def _used(self, chip: int) -> float:
        return sum(n for _, n in self.parts[chip])

    def _kinds(self) -> list[str]:
        return list(dict.fromkeys(k for part in self.parts for k, n in part if n > 0))

    def _host_head(self, chip: int) -> str | None:
        n = self.chips_per_host
        if not n or chip % n:
            return None
        held = sum(self._used(c) for c in range(chip, chip + n))
        return f"host {chip // n} (chips {chip}-{chip + n - 1}): {format_bytes(int(held))} in all"

    def _pct(self, used: float) -> str:
        p = 100 * used / self.capacity
        return f"{p:.0f}%" if p >= 1 or p == 0 else "<1%"

    def _legend(self) -> str:
        return ", ".join(f"{KIND_STYLE.get(k, _OTHER)[0]} {k}" for k in self._kinds())

    def to_text(self, width: int | None = None) -> str:
        width = terminal_width(width)
        bar = max(min(width - 56, 40), 10)
        lines = [clip(f"{self.title}: {format_bytes(self.capacity)} per chip", width)]
        for text in (f"{self._legend()}, · free", self.note):
            if text:
                lines += textwrap.wrap(text, width, initial_indent="  ", subsequent_indent="  ")
        for chip, part in enumerate(self.parts):
            head = self._host_head(chip)
            if head:
                lines.append(clip(f" {head}", width))
            cells, drawn = "", 0
            for kind, n in part:
                k = min(round(bar * n / self.capacity), bar - drawn)
                cells += KIND_STYLE.get(kind, _OTHER)[0] * k
                drawn += k
            used = self._used(chip)
            over = " OVER" if used > self.capacity else ""
            lines.append(clip(f"  chip {chip:<3}│{cells}{'·' * (bar - drawn)}│ "
                              f"{format_bytes(int(used))} ({self._pct(used)}){over}", width))
        return "\n".join(lines)

    def to_html(self) -> str:
        rows = []
        for chip, part in enumerate(self.parts):
            head = self._host_head(chip)
            if head:
                rows.append(f"<div style='margin-top:4px'><b>{esc(head)}</b></div>")
            used = self._used(chip)
            segments, left = "", 100.0
            for kind, n in part:
                pct = min(100 * n / self.capacity, left)
                left -= pct
                color = KIND_STYLE.get(kind, _OTHER)[1]
                segments += (f"<div title='{esc(kind)}: {esc(format_bytes(int(n)))}' "
                             f"style='width:{pct:.2f}%;background:{color}'></div>")
            edge = ";outline:2px solid #dc2626" if used > self.capacity else ""
            rows.append(
                f"<div style='display:flex;align-items:center;gap:6px;margin:2px 0'>"
                f"<span style='width:56px'>chip {chip}</span><div style='width:320px;height:12px;"
                f"background:#e5e7eb;display:flex{edge}'>{segments}</div>"
                f"<span>{esc(format_bytes(int(used)))} ({esc(self._pct(used))})</span></div>"
            )
        legend = "".join(
            f"<span style='margin-right:8px'><span style='display:inline-block;width:10px;"
            f"height:10px;background:{KIND_STYLE.get(k, _OTHER)[1]}'></span> {esc(k)}</span>"
            for k in self._kinds())
        note = f"<div style='color:#6b7280'>{esc(self.note)}</div>" if self.note else ""
        return (f"<div style='{_STYLE}'><b>{esc(self.title)}</b>: "
                f"{esc(format_bytes(self.capacity))} per chip (grey: free)<div>{legend}</div>"
                f"{note}{''.join(rows)}</div>")


def memory_view(obj: Plan | MeshRun, estimate=None) -> PlanMemoryView:
    """The HBM bars of a Plan (its weights, or with ``estimate`` what fills HBM at the step's
    estimated peak) or a MeshRun (its real shards)."""
    if isinstance(obj, Plan):
        title = f"HBM, TPU {obj.generation.name}"
        per_host = obj.chips_per_host if obj.hosts > 1 else None
        memory = None if estimate is None else estimate.memory
        if memory is None:
            parts = [(("weights", w),) for w in obj.weight_bytes_per_chip]
            note = "weights at rest (a step's peak: plan with batch and seq)"
        else:
            parts = [memory.breakdown] * obj.chips
            note = (f"at the estimated peak of the {estimate.task} step ({memory.mode}), "
                    f"at {memory.at}: an estimate, not a measurement")
        return PlanMemoryView(parts, obj.hbm_per_chip, title, per_host, note)
    return PlanMemoryView([(("weights", w),) for w in obj.shard_bytes_per_chip],
                          obj.hbm_per_chip, f"HBM, TPU {obj.generation.name} (real shards)")


def _parallel(chips: int) -> str:
    """``tensor parallel over 4 chips``; ``on 1 chip (no tensor parallelism)``."""
    return (f"tensor parallel over {chips} chips" if chips > 1
            else "on 1 chip (no tensor parallelism)")


def _plan_facts(p, e=None) -> list[str]:
    topo = f" ({p.topology})" if p.topology else ""
    facts = [f"Plan: {p.model} ({p.source}), {_parallel(p.chips)} of TPU "
             f"{p.generation.name}{topo}, {dtype_name(p.dtype)} weights"]
    if e is not None and e.memory is not None:
        facts.append(f"{e.verdict}, {e.task} step")
        facts.append("at the peak (" + e.memory.at + "): " + ", ".join(
            f"{kind} {format_bytes(int(n))}" for kind, n in e.memory.breakdown))
        if not e.fits:
            facts.append("to fit: checkpoint activations (remat='full'), shard the weights over "
                         "more chips (fsdp=), or a smaller batch (plan.max_batch(task) finds "
                         "the largest)")
    else:
        fits = "weights fit" if p.weights_fit else "weights do NOT fit"
        facts.append(f"{fits}: {format_bytes(max(p.weight_bytes_per_chip))} of "
                     f"{format_bytes(p.hbm_per_chip)} HBM per chip (a step's peak: plan with "
                     "batch and seq, then plan.estimate(task))")
    facts.append(f"weights: {_per_chip(p.weight_bytes_per_chip)} per chip "
                 f"({format_bytes(p.layout.global_bytes)} unsharded)")
    if p.hosts > 1:
        facts.append(f"{p.hosts} hosts of {p.chips_per_host} chips: each host holds "
                     f"{_per_chip(p.weight_bytes_per_host)} of weights")
    return facts + [f"note: {n}" for n in p.notes]


def _wrap(facts: list[str], width: int) -> list[str]:
    return [line for f in facts for line in textwrap.wrap(f, width, subsequent_indent="  ")]


def _facts_html(facts: list[str], ok: bool) -> str:
    color = "#16a34a" if ok else "#dc2626"
    return "".join(f"<div style='{_STYLE}{f';color:{color};font-weight:600' * (k == 1)}'>"
                   f"{esc(f)}</div>" for k, f in enumerate(facts))


class PlanView(View):
    """A plan: the verdict, HBM bars per chip, every weight sorted by bytes per chip; with
    ``estimate`` (``plan.estimate(task)``), the step's estimated time on an idealised chip and
    its peak HBM (the verdict and the bars are that peak's). A plan with a step but no
    estimate given is drawn with the estimate of its forward step; ``estimate=False``: the
    weights alone, nothing estimated."""

    def __init__(self, plan: Plan, estimate=None) -> None:
        self.plan = plan
        if estimate is None and plan.batch is not None:
            estimate = plan.estimate("forward")
        self.estimate = estimate or None

    def _facts(self) -> list[str]:
        from .estimate import summary

        facts = _plan_facts(self.plan, self.estimate)
        return facts if self.estimate is None else facts + summary(self.estimate)

    def _fits(self) -> bool:
        e = self.estimate
        return self.plan.weights_fit if e is None or e.fits is None else e.fits

    def to_text(self, width: int | None = None) -> str:
        width = terminal_width(width)
        return "\n".join([*_wrap(self._facts(), width),
                          memory_view(self.plan, self.estimate).to_text(width),
                          LayoutView(self.plan.layout).to_text(width)])

    def to_html(self) -> str:
        return (f"<div>{_facts_html(self._facts(), self._fits())}"
                f"{memory_view(self.plan, self.estimate).to_html()}"
                f"{LayoutView(self.plan.layout).to_html()}</div>")


def _run_facts(r) -> list[str]:
    comms = ", ".join(f"{name} x{n}" for name, n in r.comms) or "none"
    verdict = "equal within" if r.matches else "DIFFERENT beyond"
    return [
        f"Simulated mesh: {r.model}, {_parallel(r.chips)} "
        "(one process, CPU shards, LocalTensorMode)",
        f"output vs unsharded: max |diff| {r.max_abs_diff:.3g}, {verdict} rtol {r.rtol:g} "
        f"atol {r.atol:g} on every chip",
        f"communication in the forward: {comms}",
        f"real shards per chip: {', '.join(format_bytes(b) for b in r.shard_bytes_per_chip)}",
    ]


class MeshRunView(View):
    """A tensor-parallel run on the one-process mesh next to the unsharded model."""

    def __init__(self, run: MeshRun) -> None:
        self.run = run

    def to_text(self, width: int | None = None) -> str:
        width = terminal_width(width)
        return "\n".join([*_wrap(_run_facts(self.run), width),
                          memory_view(self.run).to_text(width),
                          LayoutView(self.run.layout).to_text(width)])

    def to_html(self) -> str:
        return (f"<div>{_facts_html(_run_facts(self.run), self.run.matches)}"
                f"{memory_view(self.run).to_html()}{LayoutView(self.run.layout).to_html()}</div>")


def sharding_data(obj) -> ShardingInfo | ModelLayout | Plan | MeshRun:
    """What is drawn of ``obj``'s sharding: a tensor's (or DTensor's) ShardingInfo, a module's
    ModelLayout, sharding data as it is; anything else is a :class:`ShardingError`."""
    if isinstance(obj, torch.Tensor):
        return sharding_info(obj)
    if isinstance(obj, torch.nn.Module):
        return model_layout(obj)
    if isinstance(obj, (ShardingInfo, ModelLayout, Plan, MeshRun)):
        return obj
    raise ShardingError(
        f"Cannot draw the sharding of a {type(obj).__name__}: pass a tensor or DTensor, an "
        "nn.Module, a ShardingInfo, a ModelLayout, a Plan or a MeshRun."
    )


def view(obj, name: str | None = None, estimate=None) -> View:
    """The picture of ``obj``'s sharding (:func:`sharding_data`): a tensor's shards titled
    ``name``, a module's placement table, a plan (with ``estimate``, its step's estimated time
    and peak HBM: ``plan.estimate(task)``; ``False``: its weights alone), a mesh run (a View is
    its own picture)."""
    from .lookup import view as lookup

    if isinstance(obj, View):
        return obj
    data = sharding_data(obj)
    if estimate is not None:
        if not isinstance(data, Plan):
            raise ShardingError(f"estimate= goes with a Plan, not a {type(data).__name__}.")
        return PlanView(data, estimate)
    return ShardingView(data, name) if isinstance(data, ShardingInfo) else lookup(data)


__all__ = [
    "CHIP_COLORS",
    "LayoutView",
    "MeshRunView",
    "PlanMemoryView",
    "PlanView",
    "ShardingView",
    "blocks",
    "memory_view",
    "natural_key",
    "sharding_data",
    "table_rows",
    "view",
]


def _fills(memory) -> str:
    return ", ".join(f"{kind} {format_bytes(int(n))}" for kind, n in memory.breakdown[:4])


class BatchLimitsView(View):
    """The largest batch that fits, per remat choice (:mod:`tpu_lab.sharding.batch_limit`): the
    batch, the peak HBM per chip there and what fills it (or, where none fits, the smallest
    batch's peak)."""

    def __init__(self, limits) -> None:
        self.limits = limits

    def _head(self) -> str:
        lim = self.limits
        return (f"Largest batch that fits in HBM (estimate of an idealised chip, not a "
                f"measurement): {lim.title}, {lim.mode}; {format_bytes(lim.capacity)} per chip")

    def _rows(self) -> list[tuple[str, str, str, str]]:
        rows = []
        for r in self.limits.rows:
            memory = r.estimate.memory
            peak = format_bytes(int(memory.peak_bytes))
            if r.fits:
                batch = f"{r.batch}{'+' if r.at_limit else ''}"
                peak_text = peak
            else:
                batch, peak_text = "none", f"{peak} at batch {r.estimate_batch} (over)"
            rows.append((r.remat, batch, peak_text, _fills(memory)))
        return rows

    def to_text(self, width: int | None = None) -> str:
        width = terminal_width(width)
        heads = ("remat", "batch", "peak per chip", "what fills HBM there")
        rows = self._rows()
        widths = [max(len(h), *(len(r[k]) for r in rows)) for k, h in enumerate(heads[:3])]
        lines = _wrap([self._head()], width)
        for r in (heads, *rows):
            cells = [v.ljust(w) for v, w in zip(r[:3], widths, strict=True)]
            lines.append(clip("  " + "  ".join([*cells, r[3]]), width))
        return "\n".join(lines)

    def to_html(self) -> str:
        heads = ("remat", "batch", "peak per chip", "what fills HBM there")
        body = "".join("<tr style='border-top:1px solid #e5e7eb'>"
                       + "".join(f"<td style='{_TD}'>{esc(v)}</td>" for v in r) + "</tr>"
                       for r in self._rows())
        return (f"<div><b>{esc(self._head())}</b><table style='{_STYLE}'><thead><tr>"
                + "".join(f"<th style='{_TD};text-align:left'>{h}</th>" for h in heads)
                + f"</tr></thead><tbody>{body}</tbody></table></div>")
