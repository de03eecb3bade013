"""``torch_tpu._internal.distributed.distributed`` (stand-in): ``set_tpu_launch_env`` for
launchers (torchrun, ``torch.multiprocessing.spawn``): ``torch.tpu.distributed``'s, on the
bundled device (:mod:`tpu_lab.device.launch_env`)."""

import torch

__tpu_lab_standin__ = True
__all__ = ["set_tpu_launch_env"]


def set_tpu_launch_env(*, nnodes=None, nproc_per_node=None) -> None:
    """Set the launch environment of ``nnodes`` hosts of ``nproc_per_node`` ranks (default: one
    per device of the simulated topology) in the parent of the ranks."""
    torch.tpu.distributed.set_tpu_launch_env(nnodes=nnodes, nproc_per_node=nproc_per_node)
