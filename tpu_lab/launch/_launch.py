"""Runs an ipyparallel controller or engine for tpu_lab's cluster; exits when the process that
started it is gone (a killed notebook kernel leaves no orphan).

Run by path, not as ``-m tpu_lab...``, so that the controller does not import torch:
``python _launch.py ipyparallel.controller ARGS...``. The engines' fork server
(:mod:`.forkserver`) calls :func:`guard` and :func:`run` in each engine it forks.
"""

import contextlib
import os
import runpy
import sys
import threading
import time

#: Internal: the process id of the tpu_lab process that started a cluster's controller and
#: engines (each exits when that process is gone).
PARENT_ENV = "TPU_LAB_CLUSTER_PARENT"


def _watch(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(1)


def guard(parent: int) -> None:
    """Exit as soon as ``parent`` is no longer this process's parent."""
    threading.Thread(target=_watch, args=(parent,), daemon=True, name="tpu-lab-orphan").start()


def run(module: str, args: list[str]) -> None:
    """Run ``module`` as ``python -m module args`` would, then exit this process."""
    sys.argv = [module, *args]
    sys.path[0] = os.getcwd()  # as ``python -m`` would, not this file's folder
    code = 0
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    finally:
        # Skip interpreter finalization: closing ZeroMQ there can hang for good once the
        # owner's pipes are gone, and the watchdog thread no longer runs by then.
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        os._exit(code)


def main() -> None:
    guard(int(os.environ[PARENT_ENV]))
    # the controller forks its schedulers: each child watches the controller the same way
    os.register_at_fork(after_in_child=lambda: guard(os.getppid()))
    run(sys.argv[1], sys.argv[2:])


if __name__ == "__main__":
    main()
