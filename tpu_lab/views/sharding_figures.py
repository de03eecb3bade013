"""Matplotlib figures of sharding for reports and static notebooks (matplotlib imported here
only): the mesh with what each chip holds, and per-chip memory against HBM capacity."""

from __future__ import annotations

from ..sharding.info import ModelLayout, ShardingInfo
from ..sharding.mesh import MeshRun
from ..sharding.plan import Plan
from ..units import format_bytes
from .sharding import CHIP_COLORS, KIND_STYLE, blocks, memory_view, sharding_data

GiB = 1 << 30


def _new_figure(width: float = 10.0, height: float = 3.6):
    try:
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise ImportError("Sharding figures need matplotlib: pip install matplotlib") from exc
    fig = Figure(figsize=(width, height), layout="constrained")
    return fig, fig.subplots(1, 2)


def _mesh_axes(ax, labels: list[str], grid: tuple[int, int], title: str) -> None:
    rows, cols = grid
    for chip, label in enumerate(labels):
        r, c = divmod(chip, cols)
        ax.add_patch(_rect((c, rows - 1 - r), CHIP_COLORS[chip % len(CHIP_COLORS)]))
        ax.text(c + 0.5, rows - 0.5 - r, f"chip {chip}\n{label}", ha="center", va="center",
                fontsize=9)
    ax.set_xlim(-0.1, cols + 0.1)
    ax.set_ylim(-0.1, rows + 0.1)
    ax.set_aspect("equal")
    ax.axis("off")
    ax.set_title(title, fontsize=10)


def _rect(xy, color):
    from matplotlib.patches import FancyBboxPatch

    return FancyBboxPatch((xy[0] + 0.06, xy[1] + 0.06), 0.88, 0.88,
                          boxstyle="round,pad=0.02", facecolor=color, edgecolor="#374151")


def _grid(chips: int, topology_shape: tuple[int, ...] | None) -> tuple[int, int]:
    if topology_shape:
        dims = [d for d in topology_shape if d > 1] or [1]
        if len(dims) >= 2 and dims[0] * dims[1] == chips:
            return dims[0], dims[1]
    return 1, chips


def _memory_axes(ax, parts, capacity: int | None, title: str) -> None:
    """Stacked bars per chip: ``parts[chip]`` is ((kind, bytes), ...), coloured as the text and
    HTML bars are (:data:`tpu_lab.views.sharding.KIND_STYLE`)."""
    chips = range(len(parts))
    used = [sum(n for _, n in part) for part in parts]
    unit, name = (GiB, "GiB") if max(used) >= GiB / 8 or capacity else (1024, "KiB")
    kinds = list(dict.fromkeys(k for part in parts for k, n in part if n > 0))
    bottom = [0.0] * len(parts)
    for kind in kinds:
        heights = [dict(part).get(kind, 0.0) / unit for part in parts]
        ax.bar(chips, heights, bottom=bottom, color=KIND_STYLE.get(kind, ("", "#fbbf24"))[1],
               label=kind)
        bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
    if capacity:
        ax.axhline(capacity / unit, color="#dc2626", linestyle="--",
                   label=f"HBM {format_bytes(capacity)}")
    for c in chips:
        ax.annotate(format_bytes(int(used[c])), ((c), used[c] / unit), ha="center",
                    va="bottom", fontsize=8, xytext=(0, 2), textcoords="offset points")
    ax.set_xticks(list(chips), [f"chip {c}" for c in chips])
    ax.set_ylabel(name)
    ax.set_title(title, fontsize=10)
    ax.margins(y=0.2)
    ax.legend(fontsize=8, loc="upper left")


def figure(obj, name: str | None = None, estimate=None):
    """The mesh and per-chip memory of a Plan (with ``estimate``: what fills HBM at its
    step's estimated peak) or MeshRun, the mesh and bytes per chip of a module or model
    layout, or the shard picture and bytes per chip of a tensor or ShardingInfo (titled
    ``name``)."""
    obj = sharding_data(obj)
    fig, (left, right) = _new_figure()
    if isinstance(obj, ShardingInfo):
        _tensor_axes(left, obj, name or "tensor")
        _memory_axes(right, [(("shard", n),) for n in obj.bytes_per_chip], None,
                     "bytes per chip")
        return fig
    layout = obj if isinstance(obj, ModelLayout) else obj.layout
    gen = None if isinstance(obj, ModelLayout) else obj.generation
    shape = gen.topologies.get(layout.chips) if gen else None
    if isinstance(obj, (Plan, MeshRun)):
        bars = memory_view(obj, estimate if isinstance(obj, Plan) else None)
        parts, title = bars.parts, bars.title
    else:
        parts, title = [(("weights", n),) for n in layout.bytes_per_chip], "bytes per chip"
    labels = [format_bytes(int(sum(n for _, n in part))) for part in parts]
    _mesh_axes(left, labels, _grid(layout.chips, shape),
               f"{layout.model}: {layout.chips} chips" + (f" (TPU {gen.name})" if gen else ""))
    _memory_axes(right, parts, gen.hbm_per_device if gen else None, title)
    return fig


def _tensor_axes(ax, info: ShardingInfo, name: str) -> None:
    import numpy as np

    dims, rows, cols, cells = blocks(info)
    heights = [r1 - r0 for r0, r1 in rows]
    widths = [c1 - c0 for c0, c1 in cols]
    y = 0.0
    for r, h in enumerate(heights):
        x = 0.0
        for c, w in enumerate(widths):
            holders = cells[r][c]
            color = CHIP_COLORS[holders[0] % len(CHIP_COLORS)] if len(holders) == 1 else "#e5e7eb"
            ax.add_patch(_block((x, y), w, h, color))
            label = f"chip {holders[0]}" if len(holders) == 1 else f"{len(holders)} chips"
            ax.text(x + w / 2, y + h / 2, label, ha="center", va="center", fontsize=8)
            x += w
        y += h
    ax.set_xlim(0, max(sum(widths), 1))
    ax.set_ylim(max(sum(heights), 1), 0)  # row 0 on top, like a printed matrix
    ax.set_xticks(np.cumsum([0, *widths]))
    ax.set_yticks(np.cumsum([0, *heights]))
    ax.set_xlabel(f"dim {dims[-1]}" if dims else "")
    ax.set_ylabel(f"dim {dims[0]}" if len(dims) == 2 else "")
    ax.set_title(f"{name}: {', '.join(info.placements)}", fontsize=10)


def _block(xy, w, h, color):
    from matplotlib.patches import Rectangle

    return Rectangle(xy, w, h, facecolor=color, edgecolor="white", linewidth=1.5)
