"""One way for every benchmark script to state a figure: printed for the reader, and collected
as a JSON line when ``benchmarks/run_all.py`` runs the scripts (it sets ``TPU_LAB_BENCH_JSON``).

A figure is either a ratio against a baseline measured side by side in the same run (``baseline``
and ``value`` in the same unit; the baseline is plain CPU PyTorch unless ``baseline_label`` says
otherwise), or a measured quantity against the target the issue set (``target``, with
``lower_is_better`` saying which side passes).
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict, dataclass

JSON_ENV = "TPU_LAB_BENCH_JSON"


@dataclass(frozen=True)
class Figure:
    benchmark: str
    name: str
    value: float
    unit: str
    baseline: float | None = None
    baseline_label: str = "plain CPU"
    target: float | None = None
    lower_is_better: bool = True
    note: str = ""

    @property
    def ratio(self) -> float | None:
        """``value / baseline`` for side-by-side figures."""
        return None if not self.baseline else self.value / self.baseline

    @property
    def passed(self) -> bool | None:
        if self.target is None:
            return None
        measured = self.value if self.ratio is None else self.ratio
        return measured <= self.target if self.lower_is_better else measured >= self.target

    def line(self) -> str:
        if self.ratio is not None:
            text = (
                f"{self.name:<48} {self.baseline_label} {self.baseline:.2f} {self.unit}, "
                f"tpu_lab {self.value:.2f} {self.unit}: {self.ratio:.2f}x"
            )
        else:
            text = f"{self.name:<48} {self.value:>10.2f} {self.unit}"
        if self.target is not None:
            side = "<=" if self.lower_is_better else ">="
            verdict = "ok" if self.passed else "MISSED"
            unit = "x" if self.ratio is not None else f" {self.unit}"
            text += f"   target {side} {self.target:g}{unit}: {verdict}"
        return text + (f"   ({self.note})" if self.note else "")


def record(benchmark: str, name: str, value: float, unit: str, **kwargs) -> Figure:
    """Print one figure and, under ``run_all.py``, append it to the collected results."""
    figure = Figure(benchmark, name, value, unit, **kwargs)
    print(figure.line(), flush=True)
    path = os.environ.get(JSON_ENV)
    if path:
        with open(path, "a", encoding="utf-8") as out:
            out.write(json.dumps(asdict(figure)) + "\n")
    return figure


def quick() -> bool:
    """``--quick`` on the command line: fewer repeats (used by ``run_all.py --quick``)."""
    return "--quick" in sys.argv[1:]
