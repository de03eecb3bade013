"""``import tpu_lab``: this checkout against an earlier revision, measured side by side.

    python benchmarks/bench_import.py [--baseline REV] [--repeats N]

The baseline's ``tpu_lab/`` is taken from git (``_revisions.checkout``, default: the revision
before the packages were put in layers) into a temporary folder. Each run is a fresh
``python -X importtime -c "import tpu_lab"`` with PyTorch's device-backend autoload off (so that
the installed tpu_lab is not loaded first) and the copy first on ``PYTHONPATH``; the two are
interleaved and the medians compared: the whole import (torch included) and tpu_lab's own
modules (the sum of their self times).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _record import quick, record
from _revisions import ROOT, checkout

#: The last revision before the layers (issue 39).
BEFORE_LAYERS = "f8cbd62"


def _import_times(path: Path) -> tuple[float, float]:
    """(the whole import, tpu_lab's own modules), in seconds, of one fresh ``import tpu_lab``
    with ``path`` first on ``sys.path``."""
    env = {**os.environ, "PYTHONPATH": str(path), "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", "import tpu_lab"],
                          env=env, capture_output=True, text=True, check=True, cwd=path)
    whole = own = 0.0
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        self_us, cumulative_us, name = (part.strip() for part in line[12:].split("|"))
        if not self_us.isdigit():
            continue
        if name.startswith("tpu_lab"):
            own += int(self_us) / 1e6
        if name == "tpu_lab":
            whole = int(cumulative_us) / 1e6
    return whole, own


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default=BEFORE_LAYERS, help="a git revision")
    parser.add_argument("--repeats", type=int, default=3 if quick() else 11)
    parser.add_argument("--quick", action="store_true", help="3 repeats")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        before = checkout(args.baseline, Path(tmp))
        times: dict[str, list[tuple[float, float]]] = {"before": [], "now": []}
        for _ in range(args.repeats):
            times["before"].append(_import_times(before))
            times["now"].append(_import_times(ROOT))
    med = {k: (statistics.median(w for w, _ in v), statistics.median(o for _, o in v))
           for k, v in times.items()}
    label = f"import tpu_lab at {args.baseline}"
    record("import", "import tpu_lab (torch included)", med["now"][0] * 1e3, "ms",
           baseline=med["before"][0] * 1e3, baseline_label=label, target=1.05,
           note=f"medians of {args.repeats} interleaved fresh processes")
    record("import", "tpu_lab's own modules (self times)", med["now"][1] * 1e3, "ms",
           baseline=med["before"][1] * 1e3, baseline_label=label, target=1.05,
           note=f"medians of {args.repeats} interleaved fresh processes")


if __name__ == "__main__":
    main()
