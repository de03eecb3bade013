"""tpu_lab's stand-in for TorchTPU (``import torch_tpu`` where torch-tpu is not installed).

Loaded under the name ``torch_tpu`` by :mod:`tpu_lab.runtime.torch_tpu_finder`, only where no
torch-tpu distribution is installed. It mirrors the modules TorchTPU's users and its own
tutorials import (``api``, ``_internal.execution_mode``, ``_internal.sync``, ``_internal.profiler``,
``_internal.utils``, ``_internal.distributed``, ``_internal.pallas``, ``_internal.device``,
``_internal.compile``) on tpu_lab's bundled, simulated device: TorchTPU 0.2.0's names, and the
older ones its tutorials still use (docs/torchtpu-tutorials.md says which). As TorchTPU does when
it loads, it registers the ``"tpu_dist"`` distributed backend.
"""

import sys
import types

import tpu_lab
from tpu_lab.launch.tpu_dist import register as _register_tpu_dist
from tpu_lab.runtime.torch_tpu_finder import MIRRORS

__tpu_lab_standin__ = True
#: The TorchTPU version whose public API this stand-in mirrors.
__mirrors__ = MIRRORS

tpu_lab.backend()  # the bundled device ("tpu" is a PyTorch device from here on)
_register_tpu_dist()


class _StandinModule(types.ModuleType):
    def __repr__(self) -> str:
        return (
            f"<module 'torch_tpu' (tpu_lab stand-in: TorchTPU {MIRRORS}'s API on the bundled, "
            f"simulated device; not TorchTPU) from '{self.__file__}'>"
        )


sys.modules[__name__].__class__ = _StandinModule
