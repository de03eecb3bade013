"""``torch_tpu._internal.pallas`` (stand-in): ``jax_op`` from :mod:`tpu_lab.device.pallas` (JAX's
Pallas interpreter on the CPU)."""

from tpu_lab.device.pallas import get_pallas_mesh, jax_op

__tpu_lab_standin__ = True
__all__ = ["get_pallas_mesh", "jax_op"]
