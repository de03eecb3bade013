"""``torch_tpu._internal.utils.tracer_utils`` (stand-in): TorchTPU's tracer printing and
replay-on-CPU value checks, from :mod:`tpu_lab.numerics.tracer_utils`."""

from tpu_lab.numerics.tracer_utils import (
    pformat_activation_tracer,
    pformat_op_tracer,
    pformat_replay,
    replay_log,
)

__tpu_lab_standin__ = True
__all__ = ["pformat_activation_tracer", "pformat_op_tracer", "pformat_replay", "replay_log"]
