"""The cluster's engines, forked from one process that imported torch and tpu_lab once.

Importing torch, installing the device and importing ipyparallel's engine take seconds, and on
a machine with fewer cores than engines they took most of a cluster's start when every engine
did them. :class:`ForkServer` starts ``python forkserver.py`` (by path), which does them once
and then forks one engine per request, each with the environment of its rank and host (as a
launcher on that host would give it), its output in a log file. The engines share the server's
pages until they write them (copy-on-write), so the cluster also takes less memory.

The server forks from its only thread and before any ZeroMQ context or torch thread pool
exists. It reports each engine's exit status (it is their parent and reaps them) and exits when
the cluster closes its input or its own parent is gone; each engine exits when the server is
gone (:func:`._launch.guard`), so a killed notebook leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import subprocess
import sys
import threading
from pathlib import Path


class ForkServer:
    """The notebook's side: starts the server, asks it for engines, learns how they ended."""

    def __init__(self, env: dict[str, str]) -> None:
        self._process = subprocess.Popen(
            [sys.executable, str(Path(__file__))],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env={**os.environ, **env},
            text=True,
            bufsize=1,
        )
        self._lock = threading.Lock()
        self._pids: list[int] = []
        self._exits: dict[int, int] = {}
        self._answered = threading.Condition(self._lock)
        self._reader = threading.Thread(target=self._read, daemon=True, name="tpu-lab-fork")
        self._reader.start()

    @property
    def pid(self) -> int:
        return self._process.pid

    def fork(self, module: str, args: list[str], env: dict[str, str], log: str) -> None:
        """Ask for a process running ``python -m module args`` with ``env`` added."""
        line = json.dumps({"module": module, "args": args, "env": env, "log": log})
        self._process.stdin.write(line + "\n")
        self._process.stdin.flush()

    def wait_for(self, count: int, timeout_s: float) -> list[int]:
        """The pids of the first ``count`` processes forked (in the order asked)."""
        with self._answered:
            if not self._answered.wait_for(lambda: len(self._pids) >= count, timeout_s):
                raise TimeoutError(
                    f"the fork server forked {len(self._pids)} of {count} engines in "
                    f"{timeout_s} s (exit status {self._process.poll()})"
                )
            return self._pids[:count]

    def exit_status(self, pid: int) -> int | None:
        """How engine ``pid`` ended, as ``Popen.returncode`` says it (None: not known)."""
        with self._lock:
            return self._exits.get(pid)

    def close(self) -> None:
        """Close the server's input: it exits, and its engines with it."""
        if self._process.stdin and not self._process.stdin.closed:
            with contextlib.suppress(OSError):
                self._process.stdin.close()
        try:
            self._process.wait(5)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait(5)
        self._reader.join(5)

    def _read(self) -> None:
        for line in self._process.stdout:
            message = json.loads(line)
            with self._answered:
                if "pid" in message:
                    self._pids.append(message["pid"])
                else:
                    self._exits[message["exit"]] = message["status"]
                self._answered.notify_all()


def _status(code: int) -> int:
    """``os.waitpid``'s status as ``Popen.returncode`` writes it (negative: a signal)."""
    return -os.WTERMSIG(code) if os.WIFSIGNALED(code) else os.WEXITSTATUS(code)


def _reap(out) -> None:
    while True:
        try:
            pid, code = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        out.write(json.dumps({"exit": pid, "status": _status(code)}) + "\n")
        out.flush()


def _child(request: dict, server: int) -> None:
    from tpu_lab.launch._launch import guard, run

    os.environ.update(request["env"])
    log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    guard(server)
    run(request["module"], request["args"])


def serve() -> None:
    """The server: import once, then fork an engine for each request line on stdin."""
    parent = os.getppid()
    # what every engine needs, imported once: torch, the device, the engine and its kernel
    import ipykernel.ipkernel  # noqa: F401
    import ipyparallel.engine.app  # noqa: F401
    import IPython  # noqa: F401
    import torch.distributed  # noqa: F401

    import tpu_lab.launch._engine  # noqa: F401
    import tpu_lab.launch.torchrun  # noqa: F401
    import tpu_lab.launch.tpu_dist  # noqa: F401
    from tpu_lab.runtime import backend

    backend()  # installs the "tpu" device
    out = sys.stdout
    pending = b""
    while os.getppid() == parent:
        readable, _, _ = select.select([0], [], [], 0.2)
        _reap(out)
        if not readable:
            continue
        data = os.read(0, 1 << 16)
        if not data:
            return
        pending += data
        *lines, pending = pending.split(b"\n")
        for line in lines:
            request = json.loads(line)
            pid = os.fork()
            if pid == 0:
                _child(request, os.getppid())
            out.write(json.dumps({"pid": pid}) + "\n")
            out.flush()


if __name__ == "__main__":
    sys.path[0] = os.getcwd()  # as ``python -m`` would, not this file's folder
    try:
        serve()
    finally:
        sys.stdout.flush()
        os._exit(0)
