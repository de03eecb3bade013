"""``torch_tpu._internal`` (stand-in): the modules TorchTPU's tutorials import from it."""

__tpu_lab_standin__ = True
