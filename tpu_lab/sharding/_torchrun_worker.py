"""One torchrun worker of :func:`tpu_lab.sharding.torchrun.launch`: ``import tpu_lab`` (which
binds this process to its rank's chip), then the user's script as ``__main__``."""

import runpy
import sys

import tpu_lab  # noqa: F401  (binds the rank: tpu_lab.sharding.torchrun.bind)


def main() -> None:
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
