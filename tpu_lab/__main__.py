"""``python -m tpu_lab``: the same as the ``tpu-lab`` command."""

import sys

from .cli import main

sys.exit(main())
