"""Run every benchmark script in one command and write one report.

    python benchmarks/run_all.py [--quick] [--only NAME ...] [--out benchmarks/results]

Each ``benchmarks/bench_*.py`` runs in its own process (so one script's warm caches or threads
cannot flatter another's) and states its figures through ``_record.record``. The report is
``<out>/latest.md`` (a table: every figure, side-by-side ratios against plain CPU PyTorch, and
the target each issue set) and ``<out>/latest.png`` (the same as a bar chart). The bundled device
runs on the CPU: these figures measure tpu_lab's overhead, never TPU speed.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _record import JSON_ENV, Figure  # noqa: E402


def scripts(only: list[str] | None) -> list[Path]:
    found = sorted(HERE.glob("bench_*.py"))
    if only:
        found = [p for p in found if p.stem.removeprefix("bench_") in only or p.stem in only]
    return found


def run(paths: list[Path], quick: bool) -> tuple[list[Figure], dict[str, str]]:
    figures, failures = [], {}
    with tempfile.TemporaryDirectory() as folder:
        for path in paths:
            out = Path(folder) / f"{path.stem}.jsonl"
            env = dict(os.environ, **{JSON_ENV: str(out)})
            command = [sys.executable, str(path)] + (["--quick"] if quick else [])
            print(f"== {path.name}", flush=True)
            start = time.perf_counter()
            done = subprocess.run(command, env=env, cwd=HERE.parent)
            print(f"   ({time.perf_counter() - start:.0f} s)", flush=True)
            if done.returncode != 0:
                failures[path.stem] = f"exit status {done.returncode}"
            if out.exists():
                for line in out.read_text(encoding="utf-8").splitlines():
                    figures.append(Figure(**json.loads(line)))
    return figures, failures


def _fmt(value: float | None, unit: str = "") -> str:
    if value is None:
        return ""
    return f"{value:.3g} {unit}".strip() if abs(value) < 1000 else f"{value:,.0f} {unit}".strip()


def markdown(figures: list[Figure], failures: dict[str, str], quick: bool) -> str:
    import torch

    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# tpu_lab benchmark report",
        "",
        f"{when}; {platform.machine()}, {os.cpu_count()} CPU cores, Python "
        f"{platform.python_version()}, torch {torch.__version__}, torch threads "
        f"{torch.get_num_threads()}{'; quick mode (fewer repeats)' if quick else ''}.",
        "Reproduce: `make bench` (or `python benchmarks/run_all.py`). The bundled device runs on "
        "the CPU: ratios are tpu_lab's overhead against the baseline (plain CPU PyTorch unless "
        "named) measured side by side in one run, never TPU speed.",
        "",
        "| benchmark | figure | baseline | tpu_lab | ratio | target | met |",
        "|---|---|---|---|---|---|---|",
    ]
    for f in figures:
        side = "<=" if f.lower_is_better else ">="
        unit = "x" if f.ratio is not None else f" {f.unit}"
        target = "" if f.target is None else f"{side} {_fmt(f.target)}{unit}"
        met = {True: "yes", False: "**no**", None: ""}[f.passed]
        name = f.name + (f" ({f.note})" if f.note else "")
        base = "" if f.baseline is None else f"{f.baseline_label}: {_fmt(f.baseline, f.unit)}"
        lines.append(
            f"| {f.benchmark} | {name} | {base} | {_fmt(f.value, f.unit)} | "
            f"{'' if f.ratio is None else f'{f.ratio:.2f}x'} | {target} | {met} |"
        )
    for name, why in failures.items():
        lines.append(f"| {name} | **the script failed** ({why}) | | | | | **no** |")
    return "\n".join(lines) + "\n"


def _against_target(f: Figure) -> float:
    return f.value / f.target


def plot(figures: list[Figure], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ratios = [f for f in figures if f.ratio is not None]
    targets = [f for f in figures if f.ratio is None and f.target]
    fig, axes = plt.subplots(1, 2, figsize=(16, 0.45 * max(len(ratios), len(targets), 4) + 1.5))
    for ax, rows, title, value in (
        (axes[0], ratios, "tpu_lab / baseline, side by side (log scale)", lambda f: f.ratio),
        (axes[1], targets, "measured / target (1 = at the target)", _against_target),
    ):
        labels = [f"{f.benchmark}: {f.name}"[:60] for f in rows]
        values = [value(f) for f in rows]
        colors = ["#2e7d32" if f.passed in (True, None) else "#c62828" for f in rows]
        ax.barh(range(len(rows)), values, color=colors)
        ax.set_yticks(range(len(rows)), labels, fontsize=8)
        ax.invert_yaxis()
        ax.axvline(1.0, color="black", linewidth=0.8)
        ax.set_title(title, fontsize=10)
        if rows is ratios:
            ax.set_xscale("log")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    parser.add_argument("--only", nargs="*", help="benchmark names, e.g. device media")
    parser.add_argument("--out", default=str(HERE / "results"), help="folder for the report")
    parser.add_argument(
        "--report-only", action="store_true", help="redraw the report from <out>/latest.jsonl"
    )
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.report_only:
        lines = (out / "latest.jsonl").read_text(encoding="utf-8").splitlines()
        figures, failures = [Figure(**json.loads(line)) for line in lines], {}
    else:
        figures, failures = run(scripts(args.only), args.quick)
        (out / "latest.jsonl").write_text(
            "".join(json.dumps(asdict(f)) + "\n" for f in figures), encoding="utf-8"
        )
    (out / "latest.md").write_text(markdown(figures, failures, args.quick), encoding="utf-8")
    plot(figures, out / "latest.png")
    print(f"wrote {out / 'latest.md'} and {out / 'latest.png'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
