"""Exit 0 when tpu-lab is installed in this Python with every requirement that pyproject.toml
gives it and the extras named in argv[1] (``hf,lab``), at versions they allow; 1 otherwise.
scripts/setup.sh then has nothing to install (``make lab`` after ``make run`` starts at once)."""

from __future__ import annotations

import sys
import tomllib
from importlib import metadata
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"


def requirements(extras: set[str]) -> list[str]:
    """pyproject's dependencies and those of ``extras``, the extras made of others unfolded."""
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    optional = project.get("optional-dependencies", {})
    found, todo, seen = list(project.get("dependencies", [])), list(extras), set()
    while todo:
        extra = todo.pop()
        if extra in seen:
            continue
        seen.add(extra)
        for line in optional.get(extra, ()):
            name, _, rest = line.partition("[")
            if name.strip() == "tpu-lab":  # tpu-lab[hf,video]
                todo += rest.split("]")[0].split(",")
            else:
                found.append(line)
    return found


def main() -> int:
    from packaging.requirements import Requirement

    try:
        metadata.version("tpu-lab")
        for line in requirements({e for e in sys.argv[1].split(",") if e}):
            req = Requirement(line)
            if req.marker is not None and not req.marker.evaluate():
                continue
            if not req.specifier.contains(metadata.version(req.name), prereleases=True):
                return 1
    except metadata.PackageNotFoundError:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
