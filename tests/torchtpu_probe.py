"""Describe ``torch.tpu`` as JSON: run under the real torch_tpu and under the bundled device.

Touches nothing that starts TorchTPU's runtime (``default_generators`` would, and hangs for
minutes without a TPU).
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import sys

import torch

if sys.argv[1] == "torchtpu":
    import torch_tpu  # noqa: F401
    from torch_tpu._internal.device._device_module import _TpuDeviceProperties as props
else:
    import tpu_lab  # noqa: F401
    from tpu_lab.device.tpu_module import _TpuDeviceProperties as props

tpu = torch.tpu
try:
    tpu.is_available()
    internal_error = None
except RuntimeError as exc:
    internal_error = str(exc)
try:  # as some of TorchTPU's tutorials write it: with em.eager_mode(em.EagerMode.DEFER_NEVER)
    tpu.eager_mode(tpu.EagerMode.DEFER_NEVER)
    eager_mode_call = None
except TypeError as exc:
    eager_mode_call = str(exc).partition(". ")[0]  # ours goes on to name the working spelling

print(
    json.dumps(
        {
            "names": sorted(n for n in dir(tpu) if not n.startswith("_")),
            "eager_modes": {n: int(m.value) for n, m in tpu.EagerMode.__members__.items()},
            "default_eager_mode": tpu.eager_mode.name,
            "precisions": {n: int(p) for n, p in tpu.Precision.__members__.items()},
            "allow_excess_precision": tpu.allow_excess_precision,
            "internal_error": internal_error,
            "eager_mode_call": eager_mode_call,
            "hbm_summary_prefix": tpu._hbm_usage_summary().split(":")[0],
            "mesh_params": list(inspect.signature(tpu.topology_aware_mesh).parameters),
            "set_eager_mode_params": list(inspect.signature(tpu.set_eager_mode).parameters),
            "event_params": list(inspect.signature(tpu.Event).parameters),
            "props_fields": [f.name for f in dataclasses.fields(props)],
            "submodules": {
                s: sorted(n for n in dir(getattr(tpu, s)) if not n.startswith("_"))
                for s in ("compiler", "distributed", "ops", "optimizers", "pallas", "profiler")
            },
        }
    )
)
