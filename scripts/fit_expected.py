"""Fit the expected time's efficiencies on the 16 published runs, in the open, and judge them on
published runs they never saw.

    python scripts/fit_expected.py [--write]    (about two minutes)

1. Each run of ``tpu_lab.sharding.published_runs.MEASUREMENTS`` (the fitting set) is estimated
   from its model's published config on the meta device, and the terms of the idealised time
   are kept: per op its MXU seconds and HBM seconds, the collectives' and the launches' seconds,
   how many times each part runs (a generation's denoiser calls, a VAE decode).
2. The expected time (``tpu_lab.estimate.graph.expected_seconds``) of each run is a function of
   eight parameters: the MXU efficiency of each generation (v4, v5e, v5p, v6e, v7), the HBM
   efficiency, the share of collectives that overlap a compiled program's ops, and the host's
   seconds per run. They are fitted by least squares on ln(expected / measured), each bounded
   to what it can physically be, with a faint pull (weight 0.01) toward 0.6 / 0.8 / 0.5 / 0 so
   that a parameter no run constrains stays put instead of wandering. One set, no factor per run.
3. Leave-one-source-out cross-validation: the runs of each source (tpu-recipes and MaxText,
   MaxDiffusion, JetStream, the Hugging Face blog) are predicted by a fit on the others.
4. The held-out runs (``HELD_OUT``) are estimated with the fitted values: expected / measured
   per run, the median |ln(expected / measured)|, and whether the idealised time ever exceeds a
   measured one. ``NOT_COMPARABLE`` runs are shown beside them, with why they are not counted.

``--write`` stores the fitted values, with the fitting data they came from and the
cross-validation, in ``tpu_lab/estimate/fitted.json`` (the defaults of
``tpu_lab.estimate.assumed``). The held-out runs are never written there.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import statistics
import sys
import time
import types

import numpy as np
from scipy.optimize import least_squares

GENERATIONS = ("v4", "v5e", "v5p", "v6e", "v7")
NAMES = tuple(f"mxu_efficiency_{g}" for g in GENERATIONS) + (
    "hbm_efficiency", "collective_overlap", "host_seconds_per_step")
LOW = np.array([0.15] * 5 + [0.2, 0.0, 0.0])
HIGH = np.array([1.0] * 5 + [1.0, 1.0, 0.5])
PRIOR = np.array([0.6] * 5 + [0.8, 0.5, 0.0])
PULL = 0.01


def _terms(estimate, n: int) -> dict:
    """What the expected time of ``estimate`` run ``n`` times needs, as plain numbers."""
    work = [[round(o.compute_seconds, 9), round(o.memory_seconds, 9)] for o in estimate.ops
            if o.kind not in ("collective", "launch")]
    return {"generation": estimate.chip.generation, "mode": estimate.mode, "times": n,
            "ops": work, "collective_seconds": estimate.collective_seconds,
            "launch_seconds": estimate.launch_seconds}


def _source(row) -> str:
    for name in ("tpu-recipes", "maxtext", "maxdiffusion", "jetstream", "blog"):
        if name in row.source:
            return "tpu-recipes and MaxText" if name in ("tpu-recipes", "maxtext") else name
    return row.source


def collect(rows) -> list[dict]:
    from tpu_lab.sharding.published_runs import compare

    out = []
    for row in rows:
        c = compare(row)
        out.append({"label": row.label, "source": _source(row), "measured": row.seconds,
                    "idealised": c.seconds,
                    "parts": [_terms(e, n) for e, n in c.parts]})
    return out


def expected(run: dict, theta) -> float:
    """The expected seconds of a collected ``run`` under parameters ``theta`` (through the one
    formula the estimates use)."""
    from tpu_lab.estimate.assumed import Assumptions
    from tpu_lab.estimate.graph import expected_seconds

    a = Assumptions(**dict(zip(NAMES, map(float, theta), strict=True)))
    total = 0.0
    for part in run["parts"]:
        e = types.SimpleNamespace(
            ops=[types.SimpleNamespace(kind="work", compute_seconds=c, memory_seconds=m)
                 for c, m in part["ops"]],
            chip=types.SimpleNamespace(generation=part["generation"]), mode=part["mode"],
            collective_seconds=part["collective_seconds"], launch_seconds=part["launch_seconds"])
        total += part["times"] * expected_seconds(e, a)
    return total


def fit(runs: list[dict]) -> np.ndarray:
    def residuals(theta):
        errors = [math.log(expected(r, theta) / r["measured"]) for r in runs]
        return np.concatenate([errors, PULL * (theta - PRIOR)])

    return least_squares(residuals, PRIOR, bounds=(LOW, HIGH)).x


def cross_validate(runs: list[dict]) -> list[dict]:
    out = []
    for source in sorted({r["source"] for r in runs}):
        theta = fit([r for r in runs if r["source"] != source])
        for r in runs:
            if r["source"] == source:
                out.append({"label": r["label"], "source": source,
                            "ratio": expected(r, theta) / r["measured"]})
    return out


def _median_log(ratios) -> float:
    return statistics.median(abs(math.log(x)) for x in ratios)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="store tpu_lab/estimate/fitted.json")
    args = parser.parse_args(argv)
    import torch

    import tpu_lab  # noqa: F401
    from tpu_lab.estimate.assumed import FITTED_FILE, assume
    from tpu_lab.sharding.published_runs import HELD_OUT, MEASUREMENTS, NOT_COMPARABLE, compare

    start = time.perf_counter()
    runs = collect(MEASUREMENTS)
    theta = fit(runs)
    params = dict(zip(NAMES, (round(float(t), 4) for t in theta), strict=True))
    print("fitted on", len(runs), "runs:", json.dumps(params))
    print("\n| fitting run | source | expected / measured |\n|---|---|---:|")
    for r in runs:
        print(f"| {r['label']} | {r['source']} | {expected(r, theta) / r['measured']:.2f} |")
    cv = cross_validate(runs)
    print("\n| left-out run | left-out source | expected / measured |\n|---|---|---:|")
    for c in cv:
        print(f"| {c['label']} | {c['source']} | {c['ratio']:.2f} |")
    print(f"\ncross-validation: median |ln| {_median_log(c['ratio'] for c in cv):.3f}; "
          f"{sum(0.67 <= c['ratio'] <= 1.5 for c in cv)} of {len(cv)} within [0.67, 1.5]")
    if args.write:
        FITTED_FILE.write_text(json.dumps({
            "written": datetime.date.today().isoformat(),
            "command": "python scripts/fit_expected.py --write", "torch": torch.__version__,
            "parameters": params, "fitting_runs": runs, "cross_validation": cv,
        }, indent=1) + "\n")
        print(f"written to {FITTED_FILE}")
    with assume(**params):
        held = [compare(row) for row in HELD_OUT]
        aside = [compare(row) for row in NOT_COMPARABLE]
    print("\n| held-out run | measured s | idealised / measured | expected / measured | "
          "source |\n|---|---:|---:|---:|---|")
    for c in held:
        print(f"| {c.row.label} | {c.row.seconds:.4g} | {c.ratio:.2f} | {c.expected_ratio:.2f} "
              f"| {c.row.source} |")
    ratios = [c.expected_ratio for c in held]
    print(f"\nheld out: {len(held)} runs, {sum(0.67 <= x <= 1.5 for x in ratios)} within "
          f"[0.67, 1.5], median |ln(expected / measured)| {_median_log(ratios):.3f}; idealised "
          f"above measured: {sum(c.ratio > 1 for c in held)}")
    print("\n| not comparable | measured s | idealised / measured | expected / measured |\n"
          "|---|---:|---:|---:|")
    for c in aside:
        print(f"| {c.row.label} | {c.row.seconds:.4g} | {c.ratio:.2f} | {c.expected_ratio:.2f} |")
    print(f"\n({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main(sys.argv[1:])
