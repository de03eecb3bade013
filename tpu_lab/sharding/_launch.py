"""Runs an ipyparallel controller or engine for tpu_lab's cluster; exits when tpu_lab's process
is gone (a killed notebook kernel leaves no orphan).

Run by path, not as ``-m tpu_lab...``, so that the controller does not import torch:
``python _launch.py ipyparallel.controller ARGS...``.
"""

import os
import runpy
import sys
import threading
import time

PARENT_ENV = "TPU_LAB_CLUSTER_PARENT"


def _watch(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(1)


def main() -> None:
    parent = int(os.environ[PARENT_ENV])
    threading.Thread(target=_watch, args=(parent,), daemon=True, name="tpu-lab-orphan").start()
    module = sys.argv[1]
    sys.argv = [module, *sys.argv[2:]]
    sys.path[0] = os.getcwd()  # as ``python -m`` would, not this file's folder
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
