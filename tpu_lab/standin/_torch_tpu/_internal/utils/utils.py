"""``torch_tpu._internal.utils.utils`` (stand-in): TorchTPU's tracing and tensor tools, from
:mod:`tpu_lab.numerics.tracing`, and its parity check ``assert_close`` with ``CheckValueMode``,
from :mod:`tpu_lab.numerics.closeness`."""

from tpu_lab.numerics.closeness import CheckValueMode, Tolerance, assert_close
from tpu_lab.numerics.tracing import (
    ActivationTracer,
    OpTracer,
    format_tensor,
    get_tensor_summary,
    model_memory,
)

__tpu_lab_standin__ = True
__all__ = [
    "ActivationTracer",
    "CheckValueMode",
    "OpTracer",
    "Tolerance",
    "assert_close",
    "format_tensor",
    "get_tensor_summary",
    "model_memory",
]
