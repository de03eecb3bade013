"""``python -m tpu_lab.torchrun [torchrun options] script.py [args]``: torchrun with one simulated
chip per process (see :mod:`tpu_lab.launch.torchrun`)."""

import sys

from .launch.torchrun import main

if __name__ == "__main__":
    sys.exit(main())
