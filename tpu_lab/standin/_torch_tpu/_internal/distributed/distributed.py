"""``torch_tpu._internal.distributed.distributed`` (stand-in): ``set_tpu_launch_env`` for
launchers (torchrun, ``torch.multiprocessing.spawn``), from :mod:`tpu_lab.launch.launch_env`."""

from tpu_lab.launch.launch_env import set_tpu_launch_env

__tpu_lab_standin__ = True
__all__ = ["set_tpu_launch_env"]
