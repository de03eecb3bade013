"""Numerics: TorchTPU's value and tracing tools, per-layer parity with the CPU, and a model of
the TPU's float32 matmul (bfloat16 passes on the MXU).

- :mod:`.tracing`: ``OpTracer``, ``ActivationTracer``, ``get_tensor_summary``, ``format_tensor``,
  ``model_memory`` (TorchTPU's ``torch_tpu._internal.utils.utils``); :mod:`.tracer_utils`: their
  printing and the replay-on-CPU value check (``torch_tpu._internal.utils.tracer_utils``), text
  identical to torch-tpu 0.2.0's.
- :mod:`.parity`: :func:`parity` (``%tpu parity MODEL INPUTS``).
- :mod:`.closeness`: :func:`assert_close` with ``CheckValueMode`` (TorchTPU's parity check,
  ``torch_tpu._internal.utils.utils.assert_close``).
- :func:`mxu_matmul`, :func:`bilinear`, :func:`emulate` (``TPU_LAB_NUMERICS=tpu``): the TPU numerics
  emulation of the device (:mod:`tpu_lab.device.mxu`).
"""

from __future__ import annotations

from ..device.emulation import emulate
from ..device.mxu import bilinear, mxu_matmul
from .closeness import CheckValueMode, assert_close
from .parity import ParityReport, parity
from .tracing import ActivationTracer, OpTracer, format_tensor, get_tensor_summary, model_memory

__all__ = [
    "ActivationTracer",
    "CheckValueMode",
    "OpTracer",
    "ParityReport",
    "assert_close",
    "bilinear",
    "emulate",
    "format_tensor",
    "get_tensor_summary",
    "model_memory",
    "mxu_matmul",
    "parity",
]
