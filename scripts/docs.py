"""Build the documentation site (Sphinx, from docs/) in strict mode: any warning, a broken link
or a reference to a name that no longer exists, fails the build.

    python scripts/docs.py [OUT]        (default: build/site/; what `make docs` runs)

Open OUT/index.html: the site needs no server and no network. MyST-NB writes the notebooks'
outputs beside OUT, in OUT/../jupyter_execute (build/ is ignored by git).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: -E: read every page again, so that a warning of an unchanged page is never skipped;
#: -W --keep-going: report every warning, then fail; -n: warn about every reference without a
#: target; -q: print only warnings.
STRICT = ["-E", "-W", "--keep-going", "-n", "-q"]


def main(argv: list[str] | None = None) -> int:
    from sphinx.cmd.build import build_main

    args = sys.argv[1:] if argv is None else argv
    out = Path(args[0]) if args else ROOT / "build" / "site"
    start = time.perf_counter()
    status = build_main([*STRICT, "-b", "html", str(ROOT / "docs"), str(out)])
    took = time.perf_counter() - start
    print(f"docs: {'built' if status == 0 else 'FAILED'} {out / 'index.html'} in {took:.0f} s")
    return status


if __name__ == "__main__":
    sys.exit(main())
