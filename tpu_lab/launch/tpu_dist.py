"""TorchTPU's ``torch.distributed`` backend name, ``"tpu_dist"``, on the bundled device.

On a real TPU VM, TorchTPU registers ``"tpu_dist"`` itself and :func:`register` leaves it alone.
On the bundled device, :func:`register` adds a backend of that name whose collectives run on
gloo: a "tpu" tensor's bytes are a CPU tensor (its payload), so gloo reads and writes the
payload in place; nothing is copied and no transfer is recorded. Gloo's sockets are bound to
127.0.0.1 (to the host's address in a cluster that spans machines: :func:`listen_on`). The
same user code (``init_process_group("tpu_dist")``, DTensor, tensor parallel
``from_pretrained``) then runs unchanged on both.

Every collective reaches gloo through this class's methods, and each one has finished when it
returns (send and recv excepted). Gloo's worker thread drops its last reference to a finished
collective's tensors while it holds gloo's queue lock, and dropping a tensor that Python also
holds needs the GIL. A collective that reached gloo with the GIL held would wait for that lock
while holding the GIL, and a wait for a queued collective with the GIL held would keep the other
worker from starting it: either hangs the rank for good, and the other ranks time out. The
methods here are reached from PyTorch's functional collectives (what DTensor and tensor
parallelism call) with the GIL held; gloo's Python bindings release it while they enqueue and
wait, and by the time the functional collective's own wait runs, the collective is done.
"""

from __future__ import annotations

import threading
from datetime import timedelta

import torch
import torch.distributed as dist

#: TorchTPU's backend name (transformers maps device type "tpu" to it).
BACKEND = "tpu_dist"
#: The interface gloo listens on unless :func:`listen_on` chose another: this machine only.
LOOPBACK = "127.0.0.1"
_address = LOOPBACK


def listen_on(address: str) -> None:
    """Listen on ``address`` (a host's address in a cluster that spans machines) in the process
    groups created from now on."""
    global _address
    _address = address

_lock = threading.Lock()
_libraries: list[torch.library.Library] = []


def _cpu(x):
    """A CPU tensor sharing the bytes of ``x`` (a "tpu" tensor's payload; CPU tensors as is)."""
    if isinstance(x, torch.Tensor):
        if x.device.type == "tpu":
            from ..device import current

            return current().payload(x)
        return x
    if isinstance(x, (list, tuple)):
        return [_cpu(y) for y in x]
    return x


class TpuDistBackend(dist.ProcessGroup):
    """Collectives on "tpu" (and CPU) tensors through gloo, in place on their payloads.

    Each collective is enqueued and waited for through gloo's Python bindings, which release the
    GIL (see the module docstring); send and recv stay asynchronous, so that two ranks can post
    them in either order."""

    def __init__(self, store, rank: int, size: int, timeout: timedelta) -> None:
        super().__init__(rank, size)
        options = dist.ProcessGroupGloo._Options()
        options._timeout = timeout
        options._devices = [dist.ProcessGroupGloo.create_device(hostname=_address)]
        self._gloo = dist.ProcessGroupGloo(store, rank, size, options)
        # c10d names groups through their backends (DeviceMesh looks groups up by name)
        self._register_backend(torch.device("cpu"), dist.ProcessGroup.BackendType.GLOO, self._gloo)

    def getBackendName(self) -> str:  # noqa: N802 (c10d's name)
        return BACKEND

    def allreduce(self, tensors, opts):
        return _done(self._gloo.allreduce(_cpu(tensors), opts))

    def allreduce_coalesced(self, tensors, opts):
        return _done(self._gloo.allreduce_coalesced(_cpu(tensors), opts))

    def broadcast(self, tensors, opts):
        return _done(self._gloo.broadcast(_cpu(tensors), opts))

    def reduce(self, tensors, opts):
        return _done(self._gloo.reduce(_cpu(tensors), opts))

    def allgather(self, output_tensors, input_tensors, opts):
        return _done(self._gloo.allgather(_cpu(output_tensors), _cpu(input_tensors), opts))

    def _allgather_base(self, output, input, opts):
        return _done(self._gloo._allgather_base(_cpu(output), _cpu(input), opts))

    def allgather_coalesced(self, output_lists, input_list, opts):
        return _done(self._gloo.allgather_coalesced(_cpu(output_lists), _cpu(input_list), opts))

    def all_gather_single_coalesced(self, outputs, inputs, opts):
        """What the functional ``all_gather_into_tensor`` calls, one tensor at a time."""
        return _one_by_one(self._gloo._allgather_base, outputs, inputs, opts)

    def gather(self, output_tensors, input_tensors, opts):
        return _done(self._gloo.gather(_cpu(output_tensors), _cpu(input_tensors), opts))

    def scatter(self, output_tensors, input_tensors, opts):
        return _done(self._gloo.scatter(_cpu(output_tensors), _cpu(input_tensors), opts))

    def reduce_scatter(self, output_tensors, input_tensors, opts):
        return _done(self._gloo.reduce_scatter(_cpu(output_tensors), _cpu(input_tensors), opts))

    def _reduce_scatter_base(self, output, input, opts):
        return _done(self._gloo._reduce_scatter_base(_cpu(output), _cpu(input), opts))

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts):
        """What the functional ``reduce_scatter_tensor`` calls, one tensor at a time."""
        return _one_by_one(self._gloo._reduce_scatter_base, outputs, inputs, opts)

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts):
        return _done(
            self._gloo.alltoall_base(
                _cpu(output), _cpu(input), output_split_sizes, input_split_sizes, opts
            )
        )

    def alltoall(self, output_tensors, input_tensors, opts):
        return _done(self._gloo.alltoall(_cpu(output_tensors), _cpu(input_tensors), opts))

    def send(self, tensors, dst, tag):
        return self._gloo.send(_cpu(tensors), dst, tag)

    def recv(self, tensors, src, tag):
        return self._gloo.recv(_cpu(tensors), src, tag)

    def recv_anysource(self, tensors, tag):
        return self._gloo.recv_anysource(_cpu(tensors), tag)

    def barrier(self, opts):
        return _done(self._gloo.barrier(opts))


def _done(work):
    """``work``, finished: gloo's binding waits with the GIL released."""
    work.wait()
    return work


def _one_by_one(collective, outputs, inputs, opts):
    """A coalesced collective run as one ``collective(output, input, opts)`` per pair, each
    finished before the next; the last work (an empty finished one for no tensors)."""
    works = [
        _done(collective(out, inp, opts))
        for out, inp in zip(_cpu(outputs), _cpu(inputs), strict=True)
    ]
    return works[-1] if works else _nothing()


def _nothing():
    """A finished work, for a coalesced collective given no tensors."""
    from torch._C._distributed_c10d import _create_work_from_future

    future = torch.futures.Future()
    future.set_result([])
    return _create_work_from_future(future)


def _create(store, rank: int, size: int, timeout: timedelta) -> TpuDistBackend:
    return TpuDistBackend(store, rank, size, timeout)


def is_registered() -> bool:
    return BACKEND.upper() in dist.Backend._plugins or BACKEND in dist.Backend.backend_list


def _functional_ops() -> list[str]:
    """Every overload of PyTorch's functional collectives (what DTensor and TP call)."""
    return sorted(
        {
            s.name.split("::")[1] + (f".{s.overload_name}" if s.overload_name else "")
            for s in torch._C._jit_get_all_schemas()
            if s.name.startswith("_c10d_functional::")
        }
    )


def _register_functional_kernels() -> None:
    """Functional collectives on "tpu" tensors run on their CPU payloads (then on gloo)."""
    lib = torch.library.Library("_c10d_functional", "IMPL")
    for name in _functional_ops():
        base, _, overload = name.partition(".")
        op = getattr(getattr(torch.ops._c10d_functional, base), overload or "default")
        lib.impl(name, _collective_kernel(op), "PrivateUse1")
    _libraries.append(lib)


_WAIT = torch.ops._c10d_functional.wait_tensor.default


def _waited(out):
    """The functional collective's results once it has finished (a wait on a "tpu" tensor
    later would not find the collective, which was registered under the CPU result)."""
    if isinstance(out, torch.Tensor):
        return _WAIT(out)
    if isinstance(out, (list, tuple)):
        return type(out)(_waited(y) for y in out)
    return out


def _collective_kernel(op):
    from ..device import current

    wrap = current().wrap

    def back(out, originals: dict[int, torch.Tensor]):
        if isinstance(out, torch.Tensor):
            # an input returned as is (in-place collectives, wait_tensor): the "tpu" tensor itself
            if id(out) in originals:
                return originals[id(out)]
            return wrap(out) if out.device.type == "cpu" else out
        if isinstance(out, (list, tuple)):
            return type(out)(back(y, originals) for y in out)
        return out

    def kernel(*args, **kwargs):
        originals: dict[int, torch.Tensor] = {}

        def unwrap(x):
            if isinstance(x, torch.Tensor) and x.device.type == "tpu":
                cpu = _cpu(x)
                originals[id(cpu)] = x
                return cpu
            if isinstance(x, (list, tuple)):
                return type(x)(unwrap(y) for y in x)
            return x

        out = op(*unwrap(args), **{k: unwrap(v) for k, v in kwargs.items()})
        if op is not _WAIT:  # finished before its bytes become a "tpu" tensor's
            out = _waited(out)
        return back(out, originals)

    return kernel


def register() -> str:
    """Make ``init_process_group("tpu_dist")`` work here; returns the backend name. Idempotent.

    TorchTPU's own backend is kept where TorchTPU registered it (a real TPU VM)."""
    from ..runtime import backend

    with _lock:
        if is_registered():
            return BACKEND
        if not backend().simulated:
            from ..errors import SpmdError

            raise SpmdError(
                "TorchTPU is driving this process but its 'tpu_dist' backend is not registered "
                "with torch.distributed; import torch_tpu before creating the process group."
            )
        dist.Backend.register_backend(BACKEND, _create, devices=["cpu", "tpu"])
        _register_functional_kernels()
    return BACKEND
