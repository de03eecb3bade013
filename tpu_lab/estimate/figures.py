"""The roofline picture: each op (or fused group) and each whole estimate as a point of
arithmetic intensity (FLOPs per HBM byte) and the FLOP/s its estimated time implies, under
the chip's roofline ``min(peak, bandwidth x intensity)``. Ops without MXU FLOPs (vector work,
memory-bound by construction) have no place on a log FLOP/s axis; the caption counts them."""

from __future__ import annotations

from .result import LABEL, Estimate


def roofline(*estimates: Estimate, top: int = 12, ax=None):
    """A matplotlib figure of ``estimates`` against their chips' rooflines: the ``top`` most
    expensive ops of each as small points, each estimate as a whole as a large one."""
    import matplotlib.pyplot as plt
    import numpy as np

    if not estimates:
        raise ValueError("roofline() needs at least one Estimate.")
    fig = ax.figure if ax is not None else plt.figure(figsize=(7.5, 4.8))
    ax = ax or fig.add_subplot(1, 1, 1)
    points = [(e, o) for e in estimates for o in e.top(top) if o.flops and o.hbm_bytes]
    whole = [e for e in estimates if e.flops and e.hbm_bytes]
    xs = [o.flops / o.hbm_bytes for _, o in points] + [e.flops / e.hbm_bytes for e in whole]
    ridge = max(e.chip.critical_intensity for e in estimates)
    lo = min([*xs, ridge]) / 8
    hi = max([*xs, ridge]) * 8
    grid = np.logspace(np.log10(lo), np.log10(hi), 200)
    # one colour per chip, in a fixed order: a chip's roofline, ops and stars share it
    chips = sorted({e.chip for e in estimates}, key=lambda c: c.product)
    color = {c: f"C{k}" for k, c in enumerate(chips)}
    for chip in chips:
        ax.plot(grid, np.minimum(chip.bf16_flops, chip.hbm_bandwidth * grid), lw=2,
                color=color[chip],
                label=f"{chip.product} roofline (ridge {chip.critical_intensity:.0f} FLOP/B)")
    for e, o in points:
        ax.scatter(o.flops / o.hbm_bytes, o.flops / max(o.busy_seconds, 1e-30), s=18,
                   alpha=0.7, color=color[e.chip])
        ax.annotate(o.name.split(".")[-1][:24], (o.flops / o.hbm_bytes,
                    o.flops / max(o.busy_seconds, 1e-30)), fontsize=6, alpha=0.8)
    for e in whole:
        ax.scatter(e.flops / e.hbm_bytes, e.flops / e.seconds, s=120, marker="*",
                   color=color[e.chip], edgecolor="black", zorder=3,
                   label=(e.title or "estimate")[:60])
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOPs per HBM byte)")
    ax.set_ylabel("FLOP/s")
    skipped = sum(1 for e in estimates for o in e.ops if o.kind in ("vector", "fusion")
                  and not o.flops)
    ax.set_title(f"Roofline: {LABEL}", fontsize=10)
    ax.legend(fontsize=7, loc="lower right")
    if skipped:
        fig.text(0.01, 0.01, f"{skipped} op kinds without MXU FLOPs (vector work) not drawn",
                 fontsize=7)
    fig.tight_layout()
    return fig
