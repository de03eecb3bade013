"""``torch_tpu.api.streams`` (stand-in): TorchTPU's stream and event classes."""

import torch

__tpu_lab_standin__ = True
TpuStream = torch.tpu.Stream
TpuEvent = torch.tpu.Event
__all__ = ["TpuEvent", "TpuStream"]
