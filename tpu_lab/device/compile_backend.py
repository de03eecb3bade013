"""``torch.compile(backend="tpu")`` on the bundled device.

Dynamo captures the graph, AOTAutograd splits it into forward and backward ATen graphs, and
each graph is lowered to the CPU: its "tpu" device arguments become "cpu", its tensors are
the payloads of the "tpu" inputs (no copies), and the graph is compiled by Inductor's CPU
code generator (``TPU_LAB_COMPILE_LOWERING=aten``, read once at the first compilation, or a
:func:`lowering` block runs the ATen graph as is instead, which compiles instantly). Outputs
are wrapped back as "tpu" tensors. As with TorchTPU, backend
"tpu" means ``dynamic=False`` unless the caller says otherwise. A graph traced while the TPU
numerics emulation is on has its float32 matmuls and convolutions decomposed into the MXU's
bfloat16 passes at the precision current then (``tpu_lab.device.emulation``).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import os
import re
import warnings
from collections.abc import Iterator

import torch

from . import unsigned

#: Environment variable: how ``torch.compile(backend="tpu")`` graphs run on the CPU, read once,
#: at the first compilation: ``inductor`` (default: compiled C++, fast, slow to compile) or
#: ``aten`` (the ATen graph as is, instant); ``lowering("aten")`` in this module chooses it for
#: a block.
LOWERING_ENV = "TPU_LAB_COMPILE_LOWERING"
LOWERINGS = ("inductor", "aten")
_CPU = torch.device("cpu")
_CHOSEN: contextvars.ContextVar[str | None] = contextvars.ContextVar("lowering", default=None)


@functools.cache
def _lowering_from_env() -> str:
    value = os.environ.get(LOWERING_ENV, "inductor").strip().lower()
    if value not in LOWERINGS:
        raise ValueError(f"{LOWERING_ENV}={value!r}: use 'inductor' (default) or 'aten'.")
    return value


def _lowering() -> str:
    return _CHOSEN.get() or _lowering_from_env()


@contextlib.contextmanager
def lowering(name: str) -> Iterator[str]:
    """Graphs compiled inside the block run as ``name`` ("inductor" or "aten") on the CPU;
    the previous choice comes back after it, also when the block raises."""
    if name not in LOWERINGS:
        raise ValueError(f"lowering must be 'inductor' or 'aten', got {name!r}.")
    token = _CHOSEN.set(name)
    try:
        yield name
    finally:
        _CHOSEN.reset(token)


def _cpu_value(v):
    if isinstance(v, torch.device) and v.type == "tpu":
        return _CPU
    if isinstance(v, (list, tuple)):
        return type(v)(_cpu_value(x) for x in v)
    return v


def _retarget(gm: torch.fx.GraphModule) -> None:
    """Rewrite every "tpu" device constant in the graph to "cpu"."""
    for node in gm.graph.nodes:
        node.args = _cpu_value(node.args)
        node.kwargs = {k: _cpu_value(v) for k, v in node.kwargs.items()}
    gm.recompile()


def _cpu_twin(t: torch.Tensor) -> torch.Tensor:
    return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="cpu")


def _trace_convolutions_like_the_cpu() -> None:
    """While tracing, PyTorch asks which convolution backend (and so which memory format)
    a device uses. The bundled device runs the CPU's kernels, so ask about CPU tensors: the
    traced strides (channels_last kept, as on the CPU) then match what eager execution gives."""
    select, memory_format = (
        torch._C._select_conv_backend,
        torch._C._conv_determine_backend_memory_format,
    )

    def select_conv_backend(input, weight, *args, **kwargs):
        if input.device.type == "tpu":
            input, weight = _cpu_twin(input), _cpu_twin(weight)
            kwargs = {
                k: _cpu_twin(v) if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()
            }
        return select(input, weight, *args, **kwargs)

    def determine_memory_format(input, weight, backend):
        if input.device.type == "tpu":
            input, weight = _cpu_twin(input), _cpu_twin(weight)
        return memory_format(input, weight, backend)

    torch._C._select_conv_backend = select_conv_backend
    torch._C._conv_determine_backend_memory_format = determine_memory_format


def _cpu_fake(t):
    if isinstance(t, torch.Tensor):
        return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="cpu")
    return t


def _wrap(device, out, pairs):
    if not isinstance(out, torch.Tensor) or out.device.type != "cpu":
        return out
    ptr = out.untyped_storage().data_ptr()
    for outer, inner in pairs:
        if ptr and inner.untyped_storage().data_ptr() == ptr and inner.dtype == out.dtype:
            # an output that aliases an input stays a view of it
            return outer.as_strided(out.size(), out.stride(), out.storage_offset())
    return device.wrap(out)


#: Whether Inductor keeps a float32 -> bfloat16 -> float32 round trip when asked
#: (``emulate_precision_casts``): measured on torch 2.13 and 2.14; torch 2.11's drops it.
_INDUCTOR_KEEPS_CASTS = tuple(int(v) for v in torch.__version__.split(".")[:2]) >= (2, 13)


def _lower(
    device,
    gm: torch.fx.GraphModule,
    example_inputs,
    emulated: bool = False,
    training: bool = False,
):
    """``emulated``: the graph holds the TPU numerics emulation's bfloat16 roundings, which
    Inductor must keep (by default it drops a float32 -> bfloat16 -> float32 round trip; where
    it cannot keep them, the graph runs as traced, on ATen ops). ``training``: the graph is a
    forward or backward of a training step; one that holds flex_attention runs as traced too
    (Inductor compiles it for the CPU in inference only), as its eager ops would."""
    from ..estimate.recorded import COMPILED_GRAPH, CompiledGraph

    device.compiled_graphs += 1
    tag = len(device.compiled)
    device.compiled.append(CompiledGraph.of(gm, f"compiled graph {tag}"))
    mark = device.core.op_log_mark
    _retarget(gm)
    inductor = _lowering() == "inductor" and _inductor_can_lower(gm, training)
    if inductor and (_INDUCTOR_KEEPS_CASTS or not emulated):
        from torch._inductor.compile_fx import compile_fx_inner
        from torch.fx.passes.fake_tensor_prop import FakeTensorProp

        fake_mode = torch._guards.detect_fake_mode(example_inputs)
        with fake_mode:
            cpu_inputs = [_cpu_fake(t) for t in example_inputs]
        FakeTensorProp(gm, fake_mode).propagate_dont_convert_inputs(*cpu_inputs)
        with torch._inductor.config.patch(emulate_precision_casts=emulated):
            compiled = compile_fx_inner(gm, cpu_inputs)

        def call(args):
            return compiled(args)
    else:
        call = unsigned.runner(gm)  # ATen ops; uint16/uint32 widened where the CPU refuses

    def run(args):
        mark(COMPILED_GRAPH, tag)  # for an estimate that asks (one check otherwise)
        inputs = [device.payload(a) if device.has_payload(a) else a for a in args]
        pairs = [(a, u) for a, u in zip(args, inputs, strict=True) if u is not a]
        args.clear()
        outs = call(inputs)
        return type(outs)(_wrap(device, o, pairs) for o in outs)

    run._boxed_call = True
    return run


#: Higher-order ops that Inductor compiles for the CPU in inference only ("torch.compile on
#: CPU only supports inference"; their backward has GPU templates alone).
_INFERENCE_ONLY_ON_CPU = ("flex_attention", "flex_attention_backward")


def _inductor_can_lower(gm: torch.fx.GraphModule, training: bool) -> bool:
    """Whether Inductor's CPU code generator lowers ``gm`` (a graph of a training step that
    holds flex_attention does not)."""
    return not training or not any(
        getattr(n.target, "__name__", None) in _INFERENCE_ONLY_ON_CPU
        for n in gm.graph.nodes
        if n.op == "call_function"
    )


_DYNAMIC_REFUSED = (
    "TPU backend does not support torch.compile(..., dynamic=True, ...). Please run "
    "torch.compile() with dynamic=None or default dynamism i.e. torch.compile(model) and try again."
)


def _has_tpu_input(example_inputs) -> bool:
    return any(isinstance(t, torch.Tensor) and t.device.type == "tpu" for t in example_inputs)


def _readable(placeholder: str) -> str:
    """Dynamo's name of a graph input as the user wrote it: ``l_x_`` -> ``x``, ``l_args_0_``
    -> ``args[0]``, a compiled module's ``l_fn_modules_fc_parameters_weight_`` -> ``fc.weight``.
    """
    name = re.sub(r"^[lg]_|_$", "", placeholder, flags=re.IGNORECASE)
    name = re.sub(r"_(?:modules|parameters|buffers)_", ".", name)
    name = re.sub(r"^args_(\d+)$", r"args[\1]", name)
    return re.sub(r"^(?:fn|self)\.", "", name)


def cpu_inputs_message(gm: torch.fx.GraphModule, example_inputs) -> str | None:
    """What TorchTPU does with CPU tensors given to a ``backend="tpu"`` graph, naming them; None
    when every tensor is on "tpu" (0-dim CPU tensors, Python scalars as tensors, count too)."""
    names = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
    cpu = [_readable(name) for name, t in zip(names, example_inputs, strict=False)
           if isinstance(t, torch.Tensor) and t.device.type == "cpu"]
    if not cpu:
        return None
    shown = ", ".join(cpu[:4]) + (f" and {len(cpu) - 4} more" if len(cpu) > 4 else "")
    return (
        f"A function compiled with backend='tpu' was given CPU tensors ({shown}). As on "
        "TorchTPU, the graph runs on the chip: those tensors are copied to it on every call, and "
        "the results are on 'tpu'. Move them once with .to('tpu') (a model: model.to('tpu')), "
        "or compile without backend='tpu' to run on the CPU."
    )


def tpu_backend(device, gm: torch.fx.GraphModule, example_inputs):
    """The "tpu" compile backend of the bundled device ``device``. CPU inputs are taken as
    TorchTPU's static compiler takes them (the graph runs on the chip, its results are "tpu"
    tensors), with a warning that names them."""
    from torch._dynamo.backends.common import aot_autograd

    if not torch._dynamo.config.assume_static_by_default:
        raise NotImplementedError(_DYNAMIC_REFUSED)
    if (message := cpu_inputs_message(gm, example_inputs)) is not None:
        warnings.warn(message, UserWarning, stacklevel=2)

    decompositions = None
    if _lowering() == "inductor":  # Inductor lowers the decomposed op set it chose itself
        from torch._inductor.decomposition import select_decomp_table

        decompositions = select_decomp_table()
    decompositions = unsigned.decompositions(decompositions or {})  # uint16/uint32 as eager
    emulated = device.graph_decompositions is not None  # the TPU numerics emulation is on
    if emulated:
        decompositions = {**decompositions, **device.graph_decompositions}
    lower = functools.partial(_lower, device, emulated=emulated)
    train = functools.partial(lower, training=True)
    backend = aot_autograd(
        fw_compiler=train,
        bw_compiler=train,
        inference_compiler=lower,
        decompositions=decompositions,
    )
    return backend(gm, example_inputs)


@functools.cache
def register_with_dynamo(device):
    """Register ``device``'s "tpu" backend with Dynamo (once; it imports Dynamo) and return it."""
    from torch._dynamo.backends.registry import register_backend

    backend = functools.partial(tpu_backend, device)
    register_backend(name="tpu")(backend)
    _trace_convolutions_like_the_cpu()
    return backend


def register(device) -> None:
    """``torch.compile`` for "tpu" on ``device``, and nothing else changed (patches.py lists
    both changes):

    - ``backend="tpu"`` means ``dynamic=False`` unless the call says otherwise, as TorchTPU
      makes it; every other call reaches ``torch.compile`` exactly as written.
    - Inductor (no backend, or ``backend="inductor"``) given "tpu" inputs lowers the graph
      through this device's backend (:func:`tpu_backend`), whose graphs Inductor compiles for
      the CPU; graphs without "tpu" inputs go to Inductor untouched.

    The "tpu" backend is registered with Dynamo on first use, so that installing the device does
    not import Dynamo (about 0.8 s).
    """
    original = torch.compile
    if getattr(original, "_tpu_lab", False):
        return

    @functools.wraps(original)
    def compile(model=None, *args, **kwargs):
        if kwargs.get("backend") == "tpu":
            register_with_dynamo(device)
            kwargs.setdefault("dynamic", False)
            device.publish("compile_requested")
        return original(model, *args, **kwargs)

    compile._tpu_lab = True
    torch.compile = compile
    inductor = torch._TorchCompileInductorWrapper
    call = inductor.__call__

    @functools.wraps(call)
    def inductor_call(self, model_, inputs_):
        if _has_tpu_input(inputs_):
            backend = register_with_dynamo(device)
            device.publish("compile_requested")
            return backend(model_, inputs_)
        return call(self, model_, inputs_)

    inductor.__call__ = inductor_call
