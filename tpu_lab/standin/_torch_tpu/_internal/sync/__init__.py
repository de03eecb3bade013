"""``torch_tpu._internal.sync`` (stand-in): materialize and synchronize tensors, from
:mod:`.sync` (``torch_tpu._internal.sync.sync``), as TorchTPU's package re-exports them."""

from .sync import (
    computation_graphviz,
    computation_mlir,
    dump_computation_graphviz,
    is_materialized,
    is_materializing,
    synchronize,
)

__tpu_lab_standin__ = True
__all__ = [
    "computation_graphviz",
    "computation_mlir",
    "dump_computation_graphviz",
    "is_materialized",
    "is_materializing",
    "synchronize",
]
