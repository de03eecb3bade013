"""Host<->device transfers: ``x.to("tpu")``, ``x.cpu()``, ``dst.copy_(src)`` across devices.

Each is one CPU copy of the payload; a copy to the device is checked against HBM before host
memory is allocated, a copy to the host is a sync point. Both are reported to observers.
"""

from __future__ import annotations

import torch

from . import hooks, kernels
from .driver import chip, no_such_chip
from .kernels import _CPU, _sync_after_write, payload, sync_point, wrap

_Tensor = torch.Tensor


def _copy_from(src: _Tensor, dst: _Tensor, non_blocking: bool = False) -> _Tensor:
    """Cross-device copies: ``x.to('tpu')``, ``x.cpu()``, ``dst.copy_(src)``."""
    if src.device.type == "tpu" and dst.device.type != "tpu":
        sync_point("copy to host")
    elif src.device.type == dst.device.type == "tpu" and kernels.counter is not None:
        kernels.counter("_copy_from", (src, dst), {})  # a copy on the device is compiled
    if hooks.observers and src.device.type != dst.device.type:
        direction = f"{src.device.type}->{dst.device.type}"
        hooks.emit("transfer", direction=direction, nbytes=src.numel() * src.element_size())
    target = payload(dst) if dst.device.type == "tpu" else dst
    target.copy_(payload(src) if src.device.type == "tpu" else src)
    return dst


_to_copy_op = torch.ops.aten._to_copy.default
_EXPLICIT = torch._C.DispatchKey.CompositeExplicitAutograd


def _cpu_copy(src: _Tensor, kwargs: dict) -> _Tensor:
    """A CPU copy of ``src`` with ``_to_copy``'s dtype/memory format (``Tensor.to`` parses its
    arguments far faster than an OpOverload call with six keywords)."""
    if kwargs.get("layout") not in (None, torch.strided) or kwargs.get("pin_memory"):
        return _to_copy_op(src, **{**kwargs, "device": _CPU})
    return src.detach().to(
        dtype=kwargs.get("dtype") or src.dtype,
        memory_format=kwargs.get("memory_format") or torch.preserve_format,
        copy=True,
    )


def _to_copy(x, **kwargs):
    """``x.to(...)`` to or from "tpu": one CPU ``_to_copy`` (transfers are checked against HBM
    before host memory is allocated).

    ``non_blocking`` is dropped: every copy on the bundled device completes before it returns,
    and a non-blocking copy to the CPU would ask for pinned memory, which a Python backend
    cannot provide.
    """
    kwargs["non_blocking"] = False
    source = x.device.type
    if source not in ("cpu", "tpu"):  # meta and other devices: PyTorch's generic kernel
        return _to_copy_op._op_dk(_EXPLICIT, x, **kwargs)
    src = payload(x) if source == "tpu" else x
    device = kwargs.get("device")
    target = device.type if device is not None else source
    if target == "tpu" and device is not None and device.index:
        raise no_such_chip(device.index)
    if target != "tpu":
        sync_point("copy to host")
        if hooks.observers:
            hooks.emit("transfer", direction="tpu->cpu", nbytes=x.numel() * x.element_size())
        return _cpu_copy(src, kwargs)
    nbytes = x.numel() * (kwargs.get("dtype") or x.dtype).itemsize
    if source == "cpu" and hooks.observers:
        hooks.emit("transfer", direction="cpu->tpu", nbytes=nbytes)
    elif source == "tpu" and kernels.counter is not None:
        kernels.counter("_to_copy", (x,), kwargs)  # a conversion on the device is compiled
    c = chip()
    if c.live + nbytes > c.capacity:
        c.check(nbytes)
    return wrap(_cpu_copy(src, kwargs))


def _copy_from_and_resize(src: _Tensor, dst: _Tensor) -> _Tensor:
    if dst.device.type == "tpu":
        inner = payload(dst)
        inner.resize_(src.shape)
        _sync_after_write(dst, inner)
    else:
        dst.resize_(src.shape)
    return _copy_from(src, dst)


def _compatible_shallow_copy_type(self: _Tensor, src: _Tensor) -> bool:
    """``cpu_param.data = tpu_tensor`` is allowed, as on CUDA (so ``model.to("tpu")`` keeps its
    Parameter objects and tied weights stay tied)."""
    return self.layout == src.layout == torch.strided and {self.device.type, src.device.type} <= {
        "cpu",
        "tpu",
    }


def register(lib: torch.library.Library) -> None:
    lib.m.impl(
        "_has_compatible_shallow_copy_type", "PrivateUse1", _compatible_shallow_copy_type, False
    )
    lib.m.impl("_copy_from", "PrivateUse1", _copy_from, False)
    lib.m.impl("_copy_from_and_resize", "PrivateUse1", _copy_from_and_resize, False)
    lib.m.impl("_to_copy", "PrivateUse1", _to_copy, False)
