"""Collectives between chips: the bytes each chip sends and the time, by algorithm.

Every collective is a ring over the ``group`` chips that take part (the scaling book's model,
jax-ml/scaling-book ``sharding.md``): each chip sends its neighbour one piece per step. With
``N`` the size of the whole tensor (after an all-gather, before a reduce-scatter):

- all-gather and reduce-scatter: ``g - 1`` steps, each chip sends ``N (g - 1) / g`` bytes;
- all-reduce (a reduce-scatter, then an all-gather): twice that;
- all-to-all: ``N (g - 1) / g`` bytes of the chip's own ``N``.

Time = bytes sent / the chip's bandwidth + one hop's latency per step. Over ICI an idealised
chip drives all its links at once (``Chip.ici_bandwidth``, half its bidirectional figure);
across hosts or slices the data-center network's per-chip share (``Chip.dcn_bandwidth``).
"""

from __future__ import annotations

from ..errors import TpuLabError
from ..hardware.chips import Chip
from .assumed import Assumptions

KINDS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
NETWORKS = ("ici", "dcn")

#: PyTorch's functional collectives (what ``torch.distributed`` tensor parallelism runs and a
#: compiled graph holds) -> (kind, whether N is the op's output rather than its input).
FUNCTIONAL = {
    "_c10d_functional.all_reduce": ("all_reduce", False),
    "_c10d_functional.all_reduce_": ("all_reduce", False),
    "_c10d_functional.all_gather_into_tensor": ("all_gather", True),
    "_c10d_functional.reduce_scatter_tensor": ("reduce_scatter", False),
    "_c10d_functional.all_to_all_single": ("all_to_all", False),
}


def ring_bytes(kind: str, nbytes: float, group: int) -> float:
    """Bytes one chip sends in a ring ``kind`` of a ``nbytes`` tensor over ``group`` chips."""
    if kind not in KINDS:
        raise TpuLabError(f"Unknown collective {kind!r}; the collectives are {', '.join(KINDS)}.")
    if group <= 1:
        return 0.0
    part = nbytes * (group - 1) / group
    return 2 * part if kind == "all_reduce" else part


def steps(kind: str, group: int) -> int:
    """Ring steps of ``kind`` over ``group`` chips (each pays one hop's latency)."""
    if group <= 1:
        return 0
    return 2 * (group - 1) if kind == "all_reduce" else group - 1


def seconds(kind: str, nbytes: float, group: int, chip: Chip, network: str,
            a: Assumptions) -> float:
    """Seconds of a ring ``kind`` of ``nbytes`` over ``group`` chips on ``network``."""
    if network not in NETWORKS:
        raise TpuLabError(f"network must be 'ici' or 'dcn', got {network!r}.")
    bandwidth = chip.ici_bandwidth if network == "ici" else chip.dcn_bandwidth
    return ring_bytes(kind, nbytes, group) / bandwidth + steps(kind, group) * a.hop_seconds


def functional_kind(name: str, reads: int, writes: int) -> tuple[str, int] | None:
    """(kind, N) of a functional collective op called ``name`` reading ``reads`` bytes and
    writing ``writes``; None for any other op."""
    known = FUNCTIONAL.get(name)
    if known is None:
        return None
    kind, by_output = known
    return kind, writes if by_output else reads


def is_collective(func) -> bool:
    name = getattr(getattr(func, "_overloadpacket", None), "_qualified_op_name", "")
    return name.replace("::", ".") in FUNCTIONAL

