"""``torch_tpu._internal.sync`` (stand-in): materialize and synchronize tensors.

On the bundled device every op has run when it returns, so ``synchronize`` only records the sync
point (as ``torch.accelerator.synchronize()`` does) and every tensor is materialized. The
computation dumps name what would have been compiled: the ops recorded since the last sync point.
"""

import os

import torch

__tpu_lab_standin__ = True
__all__ = [
    "computation_graphviz",
    "computation_mlir",
    "dump_computation_graphviz",
    "is_materialized",
    "is_materializing",
    "synchronize",
]


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


def computation_mlir(*tensors) -> str:
    raise NotImplementedError(
        "computation_mlir needs TorchTPU's XLA lowering; the bundled device has no MLIR "
        "(computation_graphviz works)."
    )


def dump_computation_graphviz(tensors, file_name: str) -> None:
    directory = os.path.dirname(file_name)
    if directory:
        os.makedirs(directory, exist_ok=True)
    with open(file_name, "w") as f:
        f.write(computation_graphviz(*tensors))
