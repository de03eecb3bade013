"""``torch_tpu._internal.device`` (stand-in): TorchTPU's device module class, ``_device_module``."""

__tpu_lab_standin__ = True
