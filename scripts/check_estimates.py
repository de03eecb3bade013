"""Print the estimates beside published TPU measurements (the table in docs/estimates.md).

Each row of ``tpu_lab.sharding.published_runs.MEASUREMENTS`` is estimated from its model's
published config on the meta device, with the one set of assumptions every estimate uses, and
set beside the published time: ratio = estimated / measured seconds (an idealised chip beats a
real run; the aim is 0.4 to 1.1). Run: ``python scripts/check_estimates.py`` (about a minute).
"""

from __future__ import annotations

import argparse
import time

from tpu_lab.sharding.published_runs import MEASUREMENTS, compare, table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--only", help="rows whose label contains this text")
    args = parser.parse_args()
    rows = [m for m in MEASUREMENTS if not args.only or args.only.lower() in m.label.lower()]
    start = time.perf_counter()
    comparisons = [compare(m) for m in rows]
    print(table(comparisons))
    inside = sum(0.4 <= c.ratio <= 1.1 for c in comparisons)
    gens = sorted({m.generation for m in rows})
    print(f"\n{inside} of {len(comparisons)} estimates within 0.4-1.1 of the measured time; "
          f"generations {', '.join(gens)}; {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
