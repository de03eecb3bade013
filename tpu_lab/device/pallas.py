"""``torch.tpu.pallas`` on the bundled device: JAX (Pallas) kernels as PyTorch ops, run by JAX's
Pallas interpreter on the CPU.

TorchTPU's :func:`jax_op` registers a JAX function (typically one calling
``pl.pallas_call``) as a ``torch.library.custom_op`` whose schema comes from the function's
annotations (``jax.Array`` -> ``Tensor``; ``int``, ``float``, ``bool``, ``str`` are static
arguments). Here the op copies its tensors to JAX on the CPU, runs the function under
``jax.experimental.pallas.tpu.force_tpu_interpret_mode()`` (JAX's TPU interpret mode: the
kernel's grid, block specs, VMEM scratch and DMAs simulated on the CPU) and returns the
results on the inputs' device: the numbers equal the same kernel run in JAX with
``interpret=True``. Needs JAX: ``pip install 'tpu-lab[pallas]'``.
"""

from __future__ import annotations

import functools
import inspect
import types
import typing

import torch

from .. import _install
from ..errors import NotSimulatedError, TpuLabError

_SCALARS = (int, float, bool, str)


def require_jax():
    """``jax``, or a TpuLabError naming the extra to install."""
    try:
        import jax
    except ImportError as exc:
        raise TpuLabError(
            f"Pallas kernels on the bundled device need JAX: {_install.hint('pallas')} "
            "(JAX for the CPU: jax[cpu])."
        ) from exc
    _start_cpu_backend(jax)
    return jax


@functools.cache
def _start_cpu_backend(jax) -> None:
    """Start JAX's CPU backend without XLA_FLAGS' dump flags: they ask TorchTPU's XLA (on a TPU)
    for HLO dumps; JAX's CPU compiler, which only interprets kernels here, would fill the same
    folder with its own files (object code too) that a TPU run never writes."""
    import os

    flags = os.environ.get("XLA_FLAGS")
    if flags is None or "--xla_dump" not in flags:
        return
    os.environ["XLA_FLAGS"] = " ".join(f for f in flags.split() if not f.startswith("--xla_dump"))
    try:
        jax.devices("cpu")
    finally:
        os.environ["XLA_FLAGS"] = flags


def _to_jax(t: torch.Tensor):
    import jax.numpy as jnp
    import ml_dtypes
    import numpy as np

    cpu = t.detach().cpu().contiguous()
    if cpu.dtype == torch.bfloat16:
        return jnp.asarray(cpu.view(torch.int16).numpy().view(ml_dtypes.bfloat16))
    return jnp.asarray(np.asarray(cpu.numpy()))


def _to_torch(a, device: torch.device) -> torch.Tensor:
    import ml_dtypes
    import numpy as np

    host = np.asarray(a)
    if host.dtype == ml_dtypes.bfloat16:
        out = torch.from_numpy(host.view(np.int16).copy()).view(torch.bfloat16)
    else:
        out = torch.from_numpy(host.copy())
    return out.to(device)


def _torch_type(annotation, jax_array, where: str):
    """The torch annotation for one JAX parameter or result annotation."""
    origin = typing.get_origin(annotation)
    if annotation is jax_array:
        return torch.Tensor
    if annotation in _SCALARS:
        return annotation
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return _torch_type(args[0], jax_array, where) | None
    if origin is tuple:
        args = typing.get_args(annotation)
        if args and all(a is jax_array for a in args if a is not Ellipsis):
            return tuple[tuple(torch.Tensor for _ in args)] if Ellipsis not in args else (
                list[torch.Tensor]
            )
    raise TypeError(
        f"jax_op: {where} is annotated {annotation!r}; use jax.Array, int, float, bool or str "
        "(and a jax.Array or a tuple of them for the result)."
    )


def jax_op(
    name,
    fn=None,
    /,
    *,
    donate_argnums=None,
    mesh=None,
    input_partition_specs=None,
    output_partition_specs=None,
):
    """Register the JAX function ``fn`` as the PyTorch op ``name`` (``"namespace::op"``);
    without ``fn``, a decorator. See the module docstring."""
    if "::" not in name:
        raise ValueError(f"Op name {name} does not contain a namespace.")
    if len(name.split("::")) != 2:
        raise ValueError(f"Op name {name} must have exactly one '::' separator.")
    if mesh is not None or input_partition_specs or output_partition_specs:
        raise NotSimulatedError(
            "jax_op with a mesh (a distributed kernel) needs TorchTPU on a TPU; the bundled "
            "device runs single-device kernels."
        )

    def decorate(fn):
        return _register(name, fn, tuple(donate_argnums or ()))

    return decorate if fn is None else decorate(fn)


def _register(name: str, fn, donate: tuple[int, ...]):
    jax = require_jax()
    signature = inspect.signature(inspect.unwrap(fn), eval_str=True)
    params, static = [], []
    for i, p in enumerate(signature.parameters.values()):
        if p.annotation is inspect.Parameter.empty:
            fname = getattr(fn, "__name__", name)
            raise TypeError(f"jax_op: parameter {p.name!r} of {fname} needs an annotation.")
        kind = _torch_type(p.annotation, jax.Array, f"parameter {p.name!r}")
        if kind is not torch.Tensor:
            static.append(i)
        params.append(
            inspect.Parameter(p.name, p.POSITIONAL_OR_KEYWORD, default=p.default, annotation=kind)
        )
    result = _torch_type(signature.return_annotation, jax.Array, "the result")
    compiled = jax.jit(fn, static_argnums=tuple(static), donate_argnums=donate)

    def run(args: tuple) -> object:
        from jax.experimental.pallas import tpu as pltpu

        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        device = tensors[0].device if tensors else torch.device("cpu")
        jax_args = [_to_jax(a) if isinstance(a, torch.Tensor) else a for a in args]
        with pltpu.force_tpu_interpret_mode():
            out = compiled(*jax_args)
        if isinstance(out, (tuple, list)):
            return type(out)(_to_torch(o, device) for o in out)
        return _to_torch(out, device)

    def impl(*args):
        return run(args)

    impl.__signature__ = inspect.Signature(params, return_annotation=result)
    impl.__name__ = name.split("::")[1]
    op = torch.library.custom_op(name, mutates_args=())(impl)

    @op.register_fake
    def _fake(*args):
        from torch._subclasses.fake_tensor import unset_fake_temporarily

        def torch_dtype(jax_dtype):
            return _to_torch(jax.numpy.zeros((), jax_dtype), torch.device("cpu")).dtype

        # the dtype conversions go through real (empty) tensors: not fake ones under tracing
        with unset_fake_temporarily():
            structs = [
                jax.ShapeDtypeStruct(tuple(a.shape), _to_jax(torch.empty((), dtype=a.dtype)).dtype)
                if isinstance(a, torch.Tensor) else a
                for a in args
            ]  # fmt: skip
            shapes = jax.eval_shape(functools.partial(fn), *structs)
            flat = list(shapes) if isinstance(shapes, (tuple, list)) else [shapes]
            dtypes = [torch_dtype(s.dtype) for s in flat]
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        device = tensors[0].device if tensors else torch.device("cpu")
        empties = [
            torch.empty(tuple(s.shape), dtype=d, device=device)
            for s, d in zip(flat, dtypes, strict=True)
        ]
        return type(shapes)(empties) if isinstance(shapes, (tuple, list)) else empties[0]

    return op


def get_pallas_mesh(axis_names, mesh_shape=None, process_group=None):
    raise NotSimulatedError(
        "get_pallas_mesh maps torch ranks to TPU devices for distributed Pallas kernels; it "
        "needs TorchTPU on a TPU."
    )


def torch_tpu_module() -> types.ModuleType:
    """The ``torch.tpu.pallas`` module object (for :mod:`tpu_lab.device.tpu_module`)."""
    module = types.ModuleType("torch.tpu.pallas", "Pallas kernels as PyTorch ops (tpu_lab).")
    module.jax_op = jax_op
    module.get_pallas_mesh = get_pallas_mesh
    module.__all__ = ["get_pallas_mesh", "jax_op"]
    return module
