"""``torch_tpu._internal.utils`` (stand-in)."""

__tpu_lab_standin__ = True
