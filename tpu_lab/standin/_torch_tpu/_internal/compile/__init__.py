"""``torch_tpu._internal.compile`` (stand-in): the "tpu" ``torch.compile`` backend.

Importing it registers backend "tpu" with Dynamo, as TorchTPU's module does on import (the
bundled device also registers it at the first ``torch.compile(backend="tpu")``).
``TpuBackend()`` is that backend as TorchTPU's class: calling it compiles a graph as
``torch.compile(backend="tpu")`` does (:mod:`tpu_lab.device.compile_backend`). TorchTPU 0.2.0's
module also has ``async_compile``, ``resolve_compilations``, ``AsyncCompilationSubmitted``,
``clear_cache`` and ``TpuCompileDebug`` (XLA compilation control), which have nothing to act
on here and are not provided.
"""

from tpu_lab.device import compile_backend as _compile_backend
from tpu_lab.device import current as _current

__tpu_lab_standin__ = True
__all__ = ["TpuBackend"]

_compile_backend.register_with_dynamo(_current())


class TpuBackend:
    """The "tpu" compile backend: ``TpuBackend()(graph_module, example_inputs)``."""

    def __call__(self, graph_module, example_inputs, **options):
        if options:
            raise TypeError(
                f"TpuBackend got options {sorted(options)}: the bundled device's backend takes "
                "none (its XLA options have no compiler to reach). Call torch.compile(model, "
                'backend="tpu") without options.'
            )
        return _compile_backend.tpu_backend(_current(), graph_module, example_inputs)
