"""What the Python policy needs from whichever core runs the device.

The event log, the eager modes and the compile backend see "tpu" tensors through these few
functions: a tensor's bytes as a CPU tensor (:func:`payload`), a CPU result as a "tpu" tensor
(:func:`wrap`), the op recorder of ``DEFER_AND_FUSE`` (:func:`set_recorder`; in the other
modes ops are counted per op instead, :func:`configure_op_cache`), sync points
(:func:`sync_point`) and the default generator. The compiled core calls :func:`_notify` at sync
points and transfers; the Python core's kernels call :func:`sync_point` and emit themselves.
"""

from __future__ import annotations

import torch

from . import compile_cache, hooks, modes

_native = None
#: The recorder set while the eager mode is DEFER_AND_FUSE (``compile_cache.CACHE.record``),
#: else None.
recorder = None


def use_native(native) -> None:
    """The compiled core runs this process (``tpu_lab.device.install``)."""
    global _native
    _native = native
    native.set_notifier(_notify)
    native.op_cache_dot_ops(sorted(compile_cache.DOT_OPS))
    compile_cache.count_native_ops(native)
    configure_op_cache()


def native():
    """The compiled core's module, or None where the Python core runs."""
    return _native


def _notify(kind: str, what: str, nbytes: int) -> None:
    if kind == "sync":
        sync_point(what)
        if hooks.observers:
            hooks.emit("sync", reason=what, nbytes=nbytes)
        return
    if what == "tpu->cpu":
        sync_point("copy to host")
    if hooks.observers:
        hooks.emit("transfer", direction=what, nbytes=nbytes)


def sync_point(reason: str) -> None:
    """The host needs results: in DEFER_AND_FUSE the recorded graph ends here."""
    if recorder is not None:
        compile_cache.CACHE.flush(reason)


def synchronize() -> None:
    """``torch.accelerator.synchronize()``: a sync point, reported to observers."""
    if _native is not None:
        torch.accelerator.synchronize()
        return
    sync_point("synchronize")
    if hooks.observers:
        hooks.emit("sync", reason="synchronize", nbytes=0)


def set_recorder(fn) -> None:
    """Start (``fn``) or stop (None) reporting every op to ``fn(qualname, args, kwargs)``.
    While ops are reported they are not counted as single-op graphs (``compile_cache.OpCache``)."""
    global recorder
    recorder = fn
    if _native is not None:
        _native.set_recorder(fn)
        configure_op_cache()
    else:
        from . import kernels

        kernels.recorder = fn
        kernels.counter = compile_cache.OPS.count if fn is None else None


def configure_op_cache() -> None:
    """Tell the compiled core what its per-op counts depend on: whether it counts (not while
    ``DEFER_AND_FUSE`` records), cache-only mode, the matmul precision and
    ``allow_excess_precision`` (part of every key). Called whenever one of them changes."""
    if _native is not None:
        _native.op_cache_configure(
            recorder is None,
            compile_cache.CACHE.cache_only,
            int(modes.current_precision()),
            modes.allow_excess_precision(),
        )


def switch_recording(mode: modes.EagerMode) -> None:
    """DEFER_AND_FUSE records ops for the compile cache; leaving it ends the pending graph."""
    if mode is modes.EagerMode.DEFER_AND_FUSE:
        set_recorder(compile_cache.CACHE.record)
    elif recorder is not None:
        compile_cache.CACHE.flush("eager mode change")
        set_recorder(None)


modes.PRECISION_LISTENERS.append(configure_op_cache)
modes.EAGER_MODE_LISTENERS.append(switch_recording)


def has_payload(x) -> bool:
    """Whether ``x`` is a "tpu" tensor with bytes (not a fake tensor while tracing)."""
    if not isinstance(x, torch.Tensor) or x.device.type != "tpu":
        return False
    if _native is not None:
        return not isinstance(x, torch._subclasses.FakeTensor)
    from .driver import PAYLOAD

    return hasattr(x.untyped_storage(), PAYLOAD)


def payload(x: torch.Tensor) -> torch.Tensor:
    """A CPU tensor on the bytes of the "tpu" tensor ``x`` (no copy)."""
    if _native is not None:
        return _native.cpu_view(x)
    from .kernels import payload as python_payload

    return python_payload(x)


def wrap(cpu: torch.Tensor) -> torch.Tensor:
    """A "tpu" tensor on the bytes of the CPU tensor ``cpu`` (no copy), charged to HBM."""
    if _native is not None:
        return _native.adopt(cpu)
    from .kernels import wrap as python_wrap

    return python_wrap(cpu)


_generator = None


def default_generator() -> torch.Generator:
    """The device's default random generator (draws what the CPU's does for the same seed)."""
    global _generator
    if _generator is None:
        if _native is not None:
            _generator = _native.default_generator()
        else:
            from .kernels import default_generator as python_generator

            _generator = python_generator
    return _generator
