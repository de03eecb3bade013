"""``torch_tpu._internal.utils.utils`` (stand-in): TorchTPU's tracing and tensor tools, from
:mod:`tpu_lab.numerics.tracing`."""

from tpu_lab.numerics.tracing import (
    ActivationTracer,
    OpTracer,
    format_tensor,
    get_tensor_summary,
    model_memory,
)

__tpu_lab_standin__ = True
__all__ = ["ActivationTracer", "OpTracer", "format_tensor", "get_tensor_summary", "model_memory"]
