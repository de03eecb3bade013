"""One torchrun worker of :func:`tpu_lab.launch.torchrun.launch`: ``import tpu_lab`` (which
binds this process to its rank's chip), then the user's script as ``__main__``."""

import runpy
import sys

from torch.distributed.elastic.multiprocessing.errors import record

import tpu_lab  # noqa: F401  (binds the rank: tpu_lab.launch.torchrun.bind)


@record  # a rank's exception reaches the launcher's report (torchrun's error file)
def main() -> None:
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
