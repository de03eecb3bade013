"""Kernel registration: every ATen op on a "tpu" tensor runs its CPU kernel on the payload.

A "tpu" tensor is an ordinary PrivateUse1 tensor whose storage has no data of its own; the
storage's :class:`~tpu_lab.device.driver.Block` holds a CPU tensor with the bytes. Kernels:

* view ops run their Meta kernel on the outer tensor, so views share the outer storage (and
  therefore the payload), exactly like a real device;
* every other op unwraps its "tpu" arguments to CPU views of their payloads, runs the CPU
  kernel, and wraps fresh CPU results as "tpu" tensors (charging HBM);
* allocation ops (factories, ``*_like``, transfers) check HBM before host memory is touched.

One Python kernel is registered per ATen overload that has a CPU or CompositeExplicit kernel
(transfers have their own, in transfers.py); a fallback-only design hits an internal assert
under dispatch modes (FakeTensorMode). The per-op plan (view, in-place, out=, random...) is
worked out on the op's first call.
"""

from __future__ import annotations

import math
import threading
from functools import partial

import torch

from . import compile_cache, hooks
from .driver import PAYLOAD, Block, chip, no_such_chip

aten = torch.ops.aten
_Tensor = torch.Tensor
_Device = torch.device
_CPU = torch.device("cpu")
_create_empty = torch._C._acc.create_empty_tensor

# Ops whose composite kernels already do the right thing, or that get a hand-written kernel.
_SKIP = frozenset(
    {
        "copy_",
        "_to_copy",
        "_copy_from",
        "_copy_from_and_resize",
        "scaled_dot_product_attention",
        "_has_compatible_shallow_copy_type",
        "lift_fresh",
        "lift",
    }
)
# Ops that accept CPU index tensors next to device tensors, as CUDA's do.
_CPU_INDICES_OK = frozenset({"index", "index_put", "index_put_", "_index_put_impl_"})
# Ops that return a view of their input without saying so in their schema.
_ALIASING = frozenset({"aten::_unsafe_view"})
_META_SET = (
    aten.set_.source_Tensor,
    aten.set_.source_Tensor_storage_offset,
    aten.set_.source_Storage,
    aten.set_.source_Storage_storage_offset,
)


class _MetaKernels:
    """Run the Meta kernel of whatever op is called on PrivateUse1 tensors."""

    __slots__ = ("prev",)

    def __enter__(self) -> None:
        self.prev = torch._C._meta_in_tls_dispatch_include()
        torch._C._set_meta_in_tls_dispatch_include(True)

    def __exit__(self, *exc: object) -> None:
        torch._C._set_meta_in_tls_dispatch_include(self.prev)


def _set_metadata(outer: _Tensor, size, stride, offset: int) -> None:
    with _MetaKernels():
        aten.set_.source_Storage_storage_offset(
            outer, outer.untyped_storage(), offset, size, stride
        )


# The unpatched storage methods (storage.py patches them for "tpu"): for CPU storages only.
_storage_nbytes = torch.UntypedStorage.nbytes
storage_data_ptr = torch.UntypedStorage.data_ptr


def wrap(inner: _Tensor) -> _Tensor:
    """A new "tpu" tensor whose payload is the CPU tensor ``inner`` (no copy); charges HBM."""
    block = Block(inner, _storage_nbytes(inner.untyped_storage()))
    outer = _create_empty(inner.shape, inner.dtype)
    offset = inner.storage_offset()
    if offset or not inner.is_contiguous():
        _set_metadata(outer, inner.size(), inner.stride(), offset)
    outer.untyped_storage()._tpu_lab_block = block  # PAYLOAD, spelled out: a faster store
    return outer


class NoPayloadError(RuntimeError):
    """A "tpu" tensor without data (a FakeTensor while tracing, or one made by torch internals)."""


def _no_payload() -> RuntimeError:
    return NoPayloadError(
        "This 'tpu' tensor has no data: it was created by torch internals outside tpu_lab's "
        "bundled device (for example with torch.UntypedStorage(n, device='tpu')). Create "
        "tensors with torch.empty(..., device='tpu') or x.to('tpu')."
    )


def _view_of(block, x: _Tensor) -> _Tensor:
    """The CPU view of ``x``'s bytes in ``block``: the payload itself when ``x`` has its shape."""
    meta = block.meta
    if meta is None:
        inner = block.tensor
        meta = block.meta = (
            inner.shape, inner.stride(), inner.storage_offset(), inner.dtype, inner.is_complex()
        )  # fmt: skip
    if (
        x.shape == meta[0]
        and x.stride() == meta[1]
        and x.storage_offset() == meta[2]
        and x.dtype is meta[3]
        and not x.is_neg()
        and not (meta[4] and x.is_conj())  # only complex tensors have a conjugate bit
    ):
        return block.tensor
    inner = block.tensor
    if inner.dtype == x.dtype:
        view = inner.as_strided(x.size(), x.stride(), x.storage_offset())
    else:
        view = torch.empty(0, dtype=x.dtype).set_(
            inner.untyped_storage(), x.storage_offset(), x.size(), x.stride()
        )
    # the lazy conjugate / negative bits of a view live on the outer tensor
    if x.is_conj():
        view = view.conj()
    if x.is_neg():
        view = view._neg_view()
    return view


def payload(x: _Tensor) -> _Tensor:
    """The CPU view of a "tpu" tensor's bytes (shares memory with it)."""
    block = getattr(x.untyped_storage(), PAYLOAD, None)
    if block is None:
        raise _no_payload()
    return _view_of(block, x)


def _mixed_devices() -> RuntimeError:
    return RuntimeError(
        "Expected all tensors to be on the same device, but found at least two devices, "
        "tpu:0 and cpu! Move the CPU tensor with .to('tpu') (or the 'tpu' one with .cpu()). "
        "(With the Hugging Face Trainer, accelerate left the model on the CPU: set "
        "ACCELERATE_TORCH_DEVICE=tpu.)"
    )


def _unwrap(x, strict: bool):
    if isinstance(x, _Tensor):
        block = getattr(x.untyped_storage(), PAYLOAD, None)
        if block is not None:
            return _view_of(block, x)
        if not x.is_cpu:
            raise _no_payload() if x.device.type == "tpu" else _mixed_devices()
        if strict and x.dim() > 0:
            raise _mixed_devices()
        return x
    if isinstance(x, (list, tuple)):
        if x and isinstance(x[0], (int, float)):  # sizes, dims, scalars: nothing to unwrap
            return x
        unwrapped = [_unwrap(y, strict) for y in x]
        return unwrapped if x.__class__ is list else type(x)(unwrapped)
    if isinstance(x, torch.device) and x.type == "tpu":
        return _CPU
    return x


def _wrap_results(out, args, uargs):
    if isinstance(out, _Tensor):
        if not out.is_cpu:
            return out
        for i, u in enumerate(uargs):
            if out is u:  # the CPU kernel returned an input as is
                return args[i]
        return wrap(out)
    if isinstance(out, (list, tuple)):
        return type(out)(_wrap_results(y, args, uargs) for y in out)
    return out


# ---------------------------------------------------------------------------------------
# Plans: one closure ``plan(args, kwargs)`` per op, chosen on the op's first call. They run
# for every op on the device, so they are written for speed: the C++ op is called directly
# (``OpOverload._op``), and the common case (one fresh tensor result) skips the generic code.


_meta_included = torch._C._meta_in_tls_dispatch_include
_include_meta = torch._C._set_meta_in_tls_dispatch_include
_chip = chip()


# The C++ op is reached fastest through its Python binding (``torch.mul``, ``Tensor.view``...):
# the binding parses its arguments several times faster than ``OpOverload._op`` (an
# ``as_strided`` costs half as much). Which overload a binding runs depends on the arguments,
# so an op adopts its binding only after its first calls, run both ways under a dispatch mode,
# dispatched the same ATen ops to the same result. Bindings are skipped while a
# ``TorchFunctionMode`` is active: they would show the mode the ops run on the payloads.
_BINDINGS = (
    torch._C._VariableFunctions,
    torch._C._nn,
    torch._C._special,
    torch._C._linalg,
    torch._C._fft,
    torch._C.TensorBase,
)
_function_mode = torch._C._is_torch_function_mode_enabled


class _SeenError(Exception):
    """Raised by a probe once it has seen the first op: nothing else runs."""


def _arguments(value):
    if isinstance(value, _Tensor):
        return (value.shape, value.dtype)
    if isinstance(value, (list, tuple)):
        return tuple(_arguments(v) for v in value)
    if isinstance(value, dict):
        return tuple((k, _arguments(v)) for k, v in value.items())
    return value


def _stand_in(value):
    """A "tpu" tensor without data in place of each tensor, and the "tpu" device in place of
    the CPU (a factory's ``device`` argument, unwrapped to the CPU for the payload): ops on
    them reach a device kernel, where a probe stops them (nothing can compute on them)."""
    if isinstance(value, _Tensor):
        return _create_empty(value.shape, value.dtype)
    if isinstance(value, (list, tuple)):
        return type(value)(_stand_in(v) for v in value)
    if value.__class__ is _Device and value.type == "cpu":
        return _Device("tpu", 0)
    return value


def _first_ops(runs) -> list:
    """The first device op each of ``runs`` reaches (name and arguments), each stopped there
    by a probe in the recorder's place; None for a run that failed or reached none."""
    global recorder
    seen = []
    previous, me = recorder, threading.get_ident()

    def probe(qualname, args, kwargs):
        if threading.get_ident() != me:  # another thread's op: record it as before
            if previous is not None:
                previous(qualname, args, kwargs)
            return
        seen.append((qualname, _arguments(args), _arguments(kwargs)))
        raise _SeenError

    meta = _meta_included()
    _include_meta(False)  # view ops: reach the device kernel, not the Meta one
    recorder = probe
    try:
        firsts = []
        for run in runs:
            seen.clear()
            try:
                run()
            except _SeenError:
                pass
            except Exception:  # a binding for other arguments
                seen.clear()
            firsts.append(seen[0] if seen else None)
        return firsts
    finally:
        recorder = previous
        _include_meta(meta)


class _Binding:
    """The Python binding of one op, once it was seen to run that op (``fn``, else None).

    The dispatcher leaves out arguments equal to their defaults, and a binding's defaults can
    differ from the schema's (``binary_cross_entropy_with_logits``: reduction): the binding is
    called with every argument, ``rest`` and ``kw`` supplying the schema's defaults, unless it
    was seen to reach the same op with the same arguments when called with only the arguments
    the dispatcher passed. ``bare`` maps a number of positional arguments (no keywords) to
    whether that was seen; ``fn(*args)`` is the fastest call (no keywords to parse).
    """

    __slots__ = ("op", "fn", "tries", "rest", "kw", "bare")

    def __init__(self, op, allowed: bool) -> None:
        self.op = op
        self.fn = None
        # probes left: a first call may fail for reasons of its own (bad arguments)
        self.tries = 3 if allowed and _binding_of(op) is not None else 0
        arguments = op._schema.arguments
        self.rest = tuple(a.default_value for a in arguments if not a.kwarg_only)
        self.kw = {
            a.name: a.default_value for a in arguments if a.kwarg_only and a.has_default_value()
        }
        self.bare: dict[int, bool] = {}

    def call(self, call, args, kwargs):
        """The op's result on ``args``/``kwargs`` (CPU payloads, or outer tensors for views),
        through the binding where it was seen to be the op, probing it on the first calls."""
        fn = self.fn
        if fn is None or _function_mode():
            if self.tries and not _function_mode():
                return self.probe(call, args, kwargs)
            return call(*args, **kwargs)
        if not kwargs:
            bare = self.bare.get(len(args))
            if bare is None:
                bare = self._probe_bare(fn, call, args)
            if bare:
                return fn(*args)
        return fn(*args, *self.rest[len(args) :], **({**self.kw, **kwargs} if self.kw else kwargs))

    def probe(self, call, args, kwargs):
        """The op's result, run as ``call(*args, **kwargs)``. Before, on its first calls, the
        op and its binding are each started on stand-ins of the arguments and stopped at the
        first device op they reach; the binding is adopted if both reached the same op with
        the same arguments (the op itself, or a composite's first op)."""
        self.tries -= 1
        binding = _binding_of(self.op)
        sargs = _stand_in(args)
        skwargs = {k: _stand_in(v) for k, v in kwargs.items()}
        full = {**self.kw, **skwargs}
        first, second = _first_ops(
            (
                lambda: call(*sargs, **skwargs),
                lambda: binding(*sargs, *self.rest[len(args) :], **full),
            )
        )
        if first is not None and first == second:
            self.fn = binding
        else:
            self.tries = 0
        return call(*args, **kwargs)

    def _probe_bare(self, fn, call, args) -> bool:
        """Whether ``fn(*args)`` reaches the op with the arguments ``call(*args)`` does (the
        binding's defaults are the schema's for the arguments left out)."""
        sargs = _stand_in(args)
        first, second = _first_ops((lambda: call(*sargs), lambda: fn(*sargs)))
        bare = self.bare[len(args)] = first is not None and first == second
        return bare


def _binding_of(op):
    name = op._schema.name.partition("::")[2]
    for namespace in _BINDINGS:
        fn = getattr(namespace, name, None)
        if fn is not None:
            return fn
    return None


def _view_plan(op, bindings: bool):
    """View ops: the Meta kernel on the outer tensor (the result shares its storage)."""
    call = op._op
    binding = _Binding(op, bindings)

    def plan(args, kwargs):
        previous = _meta_included()
        _include_meta(True)
        try:
            return binding.call(call, args, kwargs)
        finally:
            _include_meta(previous)

    plan.view = True  # metadata only: no graph to compile
    return plan


def _compute_plan(op, strict: bool, kw_unwrap: bool, bindings: bool):
    """Most ops: the CPU kernel on the payloads; new results are wrapped as "tpu" tensors.

    ``kw_unwrap`` is False when no keyword-only argument can hold a tensor or a device;
    ``bindings`` is False for ops that may not use their Python binding (random ones).
    """
    call = op._op
    binding = _Binding(op, bindings)

    def plan(args, kwargs):
        uargs = [_unwrap(a, strict) for a in args]
        if kwargs and kw_unwrap:
            kwargs = {k: _unwrap(v, strict) for k, v in kwargs.items()}
        out = binding.call(call, uargs, kwargs)
        if out.__class__ is _Tensor and out.is_cpu:
            for i, u in enumerate(uargs):
                if out is u:  # the CPU kernel returned an input as is
                    return args[i]
            return wrap(out)
        return _wrap_results(out, args, uargs)

    return plan


def _device_arg_plan(plan, call):
    """Ops with a ``device`` argument: ``device='cpu'`` means CPU results, not "tpu" ones."""

    def run(args, kwargs):
        device = kwargs.get("device")
        if device is not None:
            if device.__class__ is not _Device:
                device = torch.device(device)
            if device.type == "cpu":
                return _run_to_cpu(call, True, args, kwargs)
            if device.index:
                raise no_such_chip(device.index)
        return plan(args, kwargs)

    return run


def _run_to_cpu(op, strict, args, kwargs):
    """An op on "tpu" inputs asked to produce CPU results (``device='cpu'``)."""
    uargs = [_unwrap(a, strict) for a in args]
    return op(*uargs, **{k: _unwrap(v, strict) for k, v in kwargs.items()})


def _run_mutating(op, strict, writes, returns, args, kwargs):
    """Ops that write to arguments (in-place, ``out=``, running stats): mutate the payloads.

    ``returns`` says, for each result in the schema, which written argument it is (returned as
    the outer tensor itself) or ``None`` for a new result (wrapped).
    """
    uargs = [_unwrap(a, strict) for a in args]
    ukwargs = {k: _unwrap(v, strict) for k, v in kwargs.items()}
    out = op(*uargs, **ukwargs)
    for where in writes:
        outer = args[where] if isinstance(where, int) else kwargs.get(where)
        if isinstance(outer, _Tensor) and outer.device.type == "tpu":
            inner = uargs[where] if isinstance(where, int) else ukwargs.get(where)
            _sync_after_write(outer, inner)
    if not returns:
        return None
    outs = out if len(returns) > 1 else (out,)
    results = []
    for where, value in zip(returns, outs, strict=True):
        if where is None:
            results.append(_wrap_results(value, args, uargs))
        else:
            results.append(args[where] if isinstance(where, int) else kwargs[where])
    return results[0] if len(results) == 1 else tuple(results)


def _sync_after_write(outer: _Tensor, inner: _Tensor) -> None:
    """Ops such as ``resize_``, ``t_`` or ``out=`` may have changed the payload's shape or
    re-allocated it: the outer tensor follows."""
    if (
        inner.size() == outer.size()
        and inner.stride() == outer.stride()
        and inner.storage_offset() == outer.storage_offset()
    ):
        return
    block = getattr(outer.untyped_storage(), PAYLOAD)
    block.meta = None  # the payload tensor itself may be the one whose shape changed
    if inner.untyped_storage().data_ptr() != block.tensor.untyped_storage().data_ptr() or (
        inner.untyped_storage().nbytes() != block.nbytes
    ):
        block.resize(inner)
    _set_metadata(outer, inner.size(), inner.stride(), inner.storage_offset())


def _alloc_bytes(size_at, like_at, args, kwargs) -> int | None:
    """Bytes a factory op will allocate, worked out from its arguments alone."""
    dtype = kwargs.get("dtype")
    if size_at is not None:
        size = args[size_at] if size_at < len(args) else kwargs.get("size")
    else:
        like = args[like_at] if like_at is not None and like_at < len(args) else None
        if not isinstance(like, _Tensor):
            return None
        size, dtype = like.shape, dtype or like.dtype
    try:
        numel = math.prod(int(s) for s in size)
    except TypeError:  # symbolic sizes
        return None
    return numel * (dtype or torch.get_default_dtype()).itemsize


def _factory_plan(compute, size_at, like_at):
    def plan(args, kwargs):
        nbytes = _alloc_bytes(size_at, like_at, args, kwargs)
        # Check before the host allocation: a 40 GiB request on a 32 GiB chip must not try to
        # allocate 40 GiB of host memory first. (``live`` read without the lock can only be too
        # high, by frees not yet applied: check() then decides exactly.)
        if nbytes and _chip.live + nbytes > _chip.capacity:
            _chip.check(nbytes)
        return compute(args, kwargs)

    return plan


def _random_plan(plan, gen_index: int):
    """Random ops draw from the device's own generator (seeded like CPU's) unless given one."""

    def run(args, kwargs):
        if gen_index < len(args):
            if args[gen_index] is None:
                args = (*args[:gen_index], default_generator, *args[gen_index + 1 :])
        elif kwargs.get("generator") is None:
            kwargs = {**kwargs, "generator": default_generator}
        return plan(args, kwargs)

    return run


def _seeded_plan(plan, dropout_at: int | None):
    """Random ops without a ``generator`` argument draw from the CPU's default generator:
    lend it the device generator's state for the call. (Attention with ``dropout_p=0``
    draws nothing: it runs as is.)"""

    def run(args, kwargs):
        if dropout_at is not None:
            p = args[dropout_at] if dropout_at < len(args) else kwargs.get("dropout_p", 0.0)
            if p == 0:
                return plan(args, kwargs)
        cpu_state = _cpu_generator.get_state()
        _cpu_generator.set_state(default_generator.get_state())
        try:
            return plan(args, kwargs)
        finally:
            default_generator.set_state(_cpu_generator.get_state())
            _cpu_generator.set_state(cpu_state)

    return run


_cpu_generator = torch.default_generator
#: The "tpu" device's default random generator: a CPU generator, so that the same seed gives
#: the same numbers on "tpu" as on the CPU. ``torch.manual_seed`` seeds it too.
default_generator = torch.Generator()


def _is_view(schema) -> bool:
    if schema.name in _ALIASING:
        return True
    return (
        not schema.is_mutable
        and len(schema.returns) > 0
        and all(r.alias_info is not None and not r.alias_info.is_write for r in schema.returns)
    )


def _sync_plan(plan):
    """``.item()`` (and ``bool(tensor)``, ``int(tensor)``...): the host waits for the device."""

    def run(args, kwargs):
        sync_point("item")
        if hooks.observers:
            hooks.emit("sync", reason="item", nbytes=args[0].element_size())
        return plan(args, kwargs)

    return run


def _plan(qualname: str):
    name, _, overload = qualname.partition(".")
    op = getattr(getattr(aten, name), overload or "default")
    arg_names = [a.name for a in op._schema.arguments]
    # a random op must not run twice (a binding's probe may run it and drop the result)
    random = "generator" in arg_names or torch.Tag.nondeterministic_seeded in op.tags
    plan = _base_plan(op, name, bindings=not random)
    if qualname == "_local_scalar_dense":
        return _sync_plan(plan)
    if "generator" in arg_names:
        plan = _random_plan(plan, arg_names.index("generator"))
    elif torch.Tag.nondeterministic_seeded in op.tags:
        dropout_at = arg_names.index("dropout_p") if "dropout_p" in arg_names else None
        plan = _seeded_plan(plan, dropout_at)
    if "device" in arg_names:
        plan = _device_arg_plan(plan, op._op)
    return plan


def _base_plan(op, name: str, bindings: bool):
    schema = op._schema
    strict = name not in _CPU_INDICES_OK
    if _is_view(schema) or op in _META_SET:
        return _view_plan(op, bindings)
    if schema.is_mutable:
        written = {
            (i if not a.kwarg_only else a.name): a.alias_info.before_set
            for i, a in enumerate(schema.arguments)
            if a.alias_info is not None and a.alias_info.is_write
        }
        returns = [
            next((w for w, aliases in written.items() if aliases == r.alias_info.before_set), None)
            if r.alias_info is not None
            else None
            for r in schema.returns
        ]
        return partial(_run_mutating, op._op, strict, list(written), returns)
    arg_names = [a.name for a in schema.arguments]
    # keyword-only arguments (alpha=, dtype=, out=...) need unwrapping only if one can hold a
    # tensor or a device
    kw_unwrap = any(
        a.kwarg_only and ("Tensor" in str(a.type) or "Device" in str(a.type))
        for a in schema.arguments
    )
    compute = _compute_plan(op, strict, kw_unwrap, bindings)
    if "size" in arg_names or name.endswith("_like"):
        size_at = arg_names.index("size") if "size" in arg_names else None
        like_at = arg_names.index("self") if "self" in arg_names else None
        return _factory_plan(compute, size_at, like_at)
    return compute


#: Set while the eager mode is DEFER_AND_FUSE: called with every op (see compile_cache.py).
recorder = None
#: Set in the other modes: counts every op that computes as a single-op graph
#: (compile_cache.OpCache).
counter = compile_cache.OPS.count
# What no compiled graph runs: allocation, resizing, reading a scalar to the host (views, also
# left out, are told by their plan).
_UNCOUNTED = frozenset({"_local_scalar_dense", "empty.memory_format", "empty_strided", "resize_"})


def sync_point(reason: str) -> None:
    """The host needs results: in DEFER_AND_FUSE the recorded graph ends here."""
    if recorder is not None:
        compile_cache.CACHE.flush(reason)


def _kernel(qualname: str):
    plan = None
    counted = False

    def kernel(*args, **kwargs):
        nonlocal plan, counted
        if plan is None:
            plan = _plan(qualname)
            counted = qualname not in _UNCOUNTED and not getattr(plan, "view", False)
        if recorder is not None:
            recorder(qualname, args, kwargs)
        elif counted and counter is not None:
            counter(qualname, args, kwargs)
        return plan(args, kwargs)

    return kernel


def _aten_overloads() -> list[str]:
    """Every ``aten`` overload with a CPU or CompositeExplicitAutograd kernel, not yet on tpu."""
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    names = []
    for schema in torch._C._jit_get_all_schemas():
        full = schema.name
        if not full.startswith("aten::") or full[6:] in _SKIP:
            continue
        if schema.overload_name:
            full = f"{full}.{schema.overload_name}"
        try:
            if has(full, "PrivateUse1"):
                continue
            cpu = has(full, "CPU")
            composite = has(full, "CompositeExplicitAutograd") or has(
                full, "CompositeExplicitAutogradNonFunctional"
            )
        except RuntimeError:  # a schema without a registered operator
            continue
        if cpu or (composite and not _is_view(schema)):
            names.append(full[6:])
    return names


def register(lib: torch.library.Library) -> int:
    """Register the per-op kernels into ``lib`` (an ``aten`` IMPL library); returns the count."""
    names = _aten_overloads()
    for name in names:
        lib.m.impl(name, "PrivateUse1", _kernel(name), False)
    return len(names)
