"""``torch_tpu._internal.distributed`` (stand-in)."""

__tpu_lab_standin__ = True
