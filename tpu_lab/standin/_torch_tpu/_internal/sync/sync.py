"""``torch_tpu._internal.sync.sync`` (stand-in): materialize, synchronize, show the computation.

On the bundled device every op has run when it returns, so ``synchronize`` only records the sync
point (as ``torch.accelerator.synchronize()`` does) and every tensor is materialized. The
computation dumps show what TorchTPU would compile at the next sync point: in ``DEFER_AND_FUSE``
the ops recorded since the last one (the whole pending graph, not only the part that produces the
given tensors); in the other modes none, each op being its own graph.
"""

import os

import torch

from tpu_lab.device import compile_cache, current

__tpu_lab_standin__ = True
__all__ = [
    "computation_graphviz",
    "computation_mlir",
    "dump_computation_graphviz",
    "dump_computation_mlir",
    "is_materialized",
    "is_materializing",
    "synchronize",
]

#: StableHLO's names for the ATen ops TorchTPU lowers to one StableHLO op.
_STABLEHLO = {
    "abs": "abs", "add": "add", "bitwise_and": "and", "bitwise_not": "not", "bitwise_or": "or",
    "bitwise_xor": "xor", "bmm": "dot_general", "cos": "cosine", "div": "divide",
    "exp": "exponential", "log": "log", "maximum": "maximum", "minimum": "minimum",
    "mm": "dot_general", "mul": "multiply", "neg": "negate", "pow": "power", "rsqrt": "rsqrt",
    "sin": "sine", "sqrt": "sqrt", "sub": "subtract", "tanh": "tanh",
}  # fmt: skip


def synchronize(*tensors, wait: bool = True) -> None:
    """Wait for the tensors (all pending work); a sync point in the event log."""
    torch.accelerator.synchronize()


def is_materializing(tensor: torch.Tensor) -> bool:
    return False


def is_materialized(tensor: torch.Tensor) -> bool:
    return True


def computation_graphviz(*tensors) -> str:
    """A graphviz graph of the tensors' pending computation: none is pending here."""
    flat = torch.utils._pytree.tree_leaves(tensors)
    nodes = "".join(
        f'  t{i} [label="{tuple(t.shape)} {str(t.dtype).removeprefix("torch.")} (materialized)"];\n'
        for i, t in enumerate(flat)
        if isinstance(t, torch.Tensor)
    )
    return "digraph computation {\n" + nodes + "}\n"


#: MLIR's element types.
_ELEMENT = {
    torch.bool: "i1", torch.int8: "i8", torch.int16: "i16", torch.int32: "i32",
    torch.int64: "i64", torch.uint8: "ui8", torch.uint16: "ui16", torch.uint32: "ui32",
    torch.uint64: "ui64", torch.float16: "f16", torch.bfloat16: "bf16", torch.float32: "f32",
    torch.float64: "f64",
}  # fmt: skip


def _type(signature) -> str:
    """MLIR's spelling of a recorded argument: ``tensor<2x2xf32>``, else the Python value."""
    if compile_cache._is_tensor(signature):
        shape, dtype = signature
        element = _ELEMENT.get(dtype, str(dtype).removeprefix("torch."))
        return f"tensor<{''.join(f'{d}x' for d in shape)}{element}>"
    return repr(signature)


def computation_mlir(*tensors) -> str:
    """The pending computation as MLIR-style text: one line per op recorded since the last sync
    point (``DEFER_AND_FUSE``), named as the StableHLO op TorchTPU lowers it to where there is
    one, else as the ATen op. The bundled device lowers nothing: this is its recording, not XLA's
    input. Not a sync point."""
    pending = current().cache.pending()
    mode = torch.tpu.eager_mode.name
    lines = [
        f"// tpu_lab bundled device, eager mode {mode}: {len(pending)} op(s) recorded since the "
        "last sync point (the device's recording; no StableHLO is generated here)",
        "module @pending_computation {",
    ]
    for i, (qualname, signature) in enumerate(pending):
        name = qualname.partition(".")[0].rstrip("_")
        op = f"stablehlo.{_STABLEHLO[name]}" if name in _STABLEHLO else f"aten.{qualname}"
        arguments = ", ".join(_type(s) for s in signature)
        lines.append(f"  %{i} = {op}({arguments})  // aten.{qualname}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _dump(text: str, file_name: str) -> None:
    directory = os.path.dirname(file_name)
    if directory:
        os.makedirs(directory, exist_ok=True)
    with open(file_name, "w") as f:
        f.write(text)


def dump_computation_graphviz(tensors, file_name: str) -> None:
    _dump(computation_graphviz(*tensors), file_name)


def dump_computation_mlir(tensors, file_name: str) -> None:
    _dump(computation_mlir(*tensors), file_name)
