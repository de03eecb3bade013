"""One torchrun worker of :func:`tpu_lab.launch.torchrun.launch`: the device of this rank, then
the user's script as ``__main__``. Run as ``python -m tpu_lab.launch._torchrun_worker``, Python
imports the package ``tpu_lab`` before this module, and the package binds the process to its
rank's chip as it starts (``TORCHELASTIC_RUN_ID`` is set: :func:`tpu_lab.launch.torchrun.bind`)."""

import runpy
import sys

from torch.distributed.elastic.multiprocessing.errors import record


@record  # a rank's exception reaches the launcher's report (torchrun's error file)
def main() -> None:
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
