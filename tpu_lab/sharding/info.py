"""What each chip holds of a tensor, and of every tensor of a model: the data the views draw.

:class:`ShardingInfo` is built from a DTensor (:func:`sharding_info`) or from a plan
(:mod:`tpu_lab.sharding.plan`); :class:`ModelLayout` lists every parameter and buffer of a model.
Chips are numbered like DeviceMesh ranks: chip ``i`` sits at the row-major coordinate ``i`` of
the mesh.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import product

import torch

from .._drawn import Drawn
from ..errors import ShardingError

Box = tuple[slice, ...]


@dataclass(frozen=True)
class Split:
    """One mesh dimension's placement: ``Shard`` (``dim`` set, optional fused ``blocks`` sharded
    one by one), ``Replicate`` or ``Partial`` (every chip holds a full-size partial sum)."""

    kind: str  # "shard" | "replicate" | "partial"
    dim: int | None = None
    blocks: tuple[int, ...] | None = None  # absolute sizes of fused blocks along dim
    split_factor: int | None = None  # _StridedShard: dim cut in this many equal blocks

    def __str__(self) -> str:
        if self.kind == "replicate":
            return "Replicate()"
        if self.kind == "partial":
            return "Partial(sum)"
        if self.split_factor:
            return f"_StridedShard(dim={self.dim}, split_factor={self.split_factor})"
        if self.blocks:
            return f"Shard({self.dim}, blocks={list(self.blocks)})"
        return f"Shard({self.dim})"


REPLICATE = Split("replicate")


def shard(dim: int) -> Split:
    return Split("shard", dim)


@dataclass(frozen=True)
class ShardingInfo:
    """How one tensor is laid out on a mesh of chips.

    ``slices[chip]`` is a tuple of boxes of the global tensor that the chip holds (one slice per
    dimension in each box); a plain ``Shard`` or ``Replicate`` gives one box per chip, a fused
    (packed) shard one box per block. ``bytes_per_chip[chip]`` is what those boxes weigh.
    """

    global_shape: tuple[int, ...]
    dtype: torch.dtype
    mesh_shape: tuple[int, ...]
    mesh_axis_names: tuple[str, ...]
    placements: tuple[str, ...]
    slices: tuple[tuple[Box, ...], ...]
    bytes_per_chip: tuple[int, ...]

    @property
    def chips(self) -> int:
        return len(self.bytes_per_chip)

    @property
    def ndim(self) -> int:
        return len(self.global_shape)

    @property
    def global_bytes(self) -> int:
        return math.prod(self.global_shape) * _itemsize(self.dtype)

    def local_shape(self, chip: int) -> tuple[int, ...]:
        """The shape of the chip's local tensor (its boxes concatenated)."""
        spans = [{(b[d].start, b[d].stop) for b in self.slices[chip]} for d in range(self.ndim)]
        return tuple(sum(stop - start for start, stop in s) for s in spans)

    def coordinate(self, chip: int) -> tuple[int, ...]:
        """The chip's coordinate on the mesh (row-major, like DeviceMesh ranks)."""
        return _coordinate(chip, self.mesh_shape)

    @property
    def sharded_dims(self) -> tuple[int, ...]:
        """The tensor dimensions that some mesh dimension splits, in order."""
        dims = []
        for chip_boxes in self.slices:
            for box in chip_boxes:
                for d, s in enumerate(box):
                    if (s.start, s.stop) != (0, self.global_shape[d]) and d not in dims:
                        dims.append(d)
        return tuple(sorted(dims))


def _itemsize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype, device="meta").element_size()


def _coordinate(index: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    coord = []
    for size in reversed(shape):
        coord.append(index % size)
        index //= size
    return tuple(reversed(coord))


def _cut(intervals: list[tuple[int, int]], parts: int, which: int, blocks) -> list:
    """Chunk ``which`` of ``parts`` (torch.chunk sizes) of the index list ``intervals``,
    applied to each block separately when the dimension holds fused blocks."""
    total = sum(b - a for a, b in intervals)
    pieces: list[tuple[int, int]] = []
    for offset, size in _block_spans(total, blocks):
        step = -(-size // parts)
        lo, hi = offset + min(which * step, size), offset + min((which + 1) * step, size)
        for a, b in _take(intervals, lo, hi):
            if pieces and pieces[-1][1] == a:
                pieces[-1] = (pieces[-1][0], b)
            else:
                pieces.append((a, b))
    return pieces


def _block_spans(total: int, blocks) -> list[tuple[int, int]]:
    if not blocks:
        return [(0, total)]
    spans, offset = [], 0
    for size in blocks:
        spans.append((offset, size))
        offset += size
    return spans


def _take(intervals, lo, hi) -> list[tuple[int, int]]:
    """Local positions [lo, hi) of the concatenated intervals, as global intervals."""
    out, pos = [], 0
    for a, b in intervals:
        n = b - a
        s, e = max(lo - pos, 0), min(hi - pos, n)
        if s < e:
            out.append((a + s, a + e))
        pos += n
    return out


def layout_info(
    shape: tuple[int, ...],
    dtype: torch.dtype,
    mesh_shape: tuple[int, ...],
    splits: tuple[Split, ...],
    mesh_axis_names: tuple[str, ...] | None = None,
) -> ShardingInfo:
    """The :class:`ShardingInfo` of a ``shape`` tensor placed with ``splits`` (one per mesh dim),
    applied left to right like DTensor's default shard order."""
    shape = tuple(int(s) for s in shape)
    names = tuple(mesh_axis_names or _default_axis_names(len(mesh_shape)))
    item = _itemsize(dtype)
    chips = math.prod(mesh_shape)
    all_slices, all_bytes = [], []
    for chip in range(chips):
        coord = _coordinate(chip, mesh_shape)
        per_dim = [[(0, n)] for n in shape]
        for mesh_dim, split in enumerate(splits):
            if split.kind != "shard":
                continue
            d = split.dim % len(shape) if shape else 0
            blocks = split.blocks
            if split.split_factor:
                size = sum(b - a for a, b in per_dim[d])
                blocks = (size // split.split_factor,) * split.split_factor
            per_dim[d] = _cut(per_dim[d], mesh_shape[mesh_dim], coord[mesh_dim], blocks)
        boxes = tuple(tuple(slice(a, b) for a, b in combo) for combo in product(*per_dim))
        numel = math.prod(sum(b - a for a, b in iv) for iv in per_dim)
        all_slices.append(boxes)
        all_bytes.append(numel * item)
    return ShardingInfo(
        global_shape=shape,
        dtype=dtype,
        mesh_shape=tuple(mesh_shape),
        mesh_axis_names=names,
        placements=tuple(str(s) for s in splits),
        slices=tuple(all_slices),
        bytes_per_chip=tuple(all_bytes),
    )


def _default_axis_names(ndim: int) -> tuple[str, ...]:
    return ("tp",) if ndim == 1 else tuple(f"dim{i}" for i in range(ndim))


def split_of(placement) -> Split:
    """A torch.distributed.tensor placement as a :class:`Split`."""
    name = type(placement).__name__
    if name == "_StridedShard":
        return Split("shard", placement.dim, split_factor=placement.split_factor)
    if placement.is_shard():
        return shard(placement.dim)
    if placement.is_partial():
        return Split("partial")
    return REPLICATE


def sharding_info(t: torch.Tensor) -> ShardingInfo:
    """The :class:`ShardingInfo` of a DTensor (a plain tensor: one chip holding all of it)."""
    from torch.distributed.tensor import DTensor

    if isinstance(t, DTensor):
        mesh = t.device_mesh
        return layout_info(
            tuple(t.shape),
            t.dtype,
            tuple(mesh.shape),
            tuple(split_of(p) for p in t.placements),
            mesh.mesh_dim_names or _default_axis_names(mesh.ndim),
        )
    if isinstance(t, torch.Tensor):
        return layout_info(tuple(t.shape), t.dtype, (1,), (REPLICATE,))
    raise ShardingError(
        f"sharding_info() needs a torch.Tensor or a DTensor, got {type(t).__name__}."
    )


@dataclass(frozen=True)
class TensorLayout:
    """One parameter or buffer of a model: its name, what kind, the plan style that placed it
    (``None`` when nothing in the plan named it) and its :class:`ShardingInfo`."""

    name: str
    kind: str  # "parameter" | "buffer"
    style: str | None
    info: ShardingInfo
    aliases: tuple[str, ...] = ()

    @property
    def placement(self) -> str:
        return ", ".join(self.info.placements)


@dataclass(frozen=True)
class ModelLayout(Drawn):
    """Every parameter and buffer of a model on one mesh, with totals per chip."""

    model: str
    mesh_shape: tuple[int, ...]
    mesh_axis_names: tuple[str, ...]
    entries: tuple[TensorLayout, ...]

    @property
    def chips(self) -> int:
        return math.prod(self.mesh_shape)

    @property
    def bytes_per_chip(self) -> tuple[int, ...]:
        totals = [0] * self.chips
        for e in self.entries:
            for chip, n in enumerate(e.info.bytes_per_chip):
                totals[chip] += n
        return tuple(totals)

    @property
    def global_bytes(self) -> int:
        """The bytes of the unsharded model."""
        return sum(e.info.global_bytes for e in self.entries)

    def by_bytes(self) -> list[TensorLayout]:
        """Entries, heaviest per chip first (ties: by name)."""
        return sorted(self.entries, key=lambda e: (-max(e.info.bytes_per_chip), e.name))

    def __getitem__(self, name: str) -> TensorLayout:
        for e in self.entries:
            if e.name == name or name in e.aliases:
                return e
        raise KeyError(name)


def model_layout(module: torch.nn.Module) -> ModelLayout:
    """The layout of a model whose parameters are DTensors (after tensor parallelism); plain
    tensors count as replicated on the model's mesh."""
    from torch.distributed.tensor import DTensor

    tensors = [("parameter", n, p) for n, p in module.named_parameters(remove_duplicate=False)]
    tensors += [("buffer", n, b) for n, b in module.named_buffers(remove_duplicate=False)]
    mesh = next((t.device_mesh for _, _, t in tensors if isinstance(t, DTensor)), None)
    mesh_shape = tuple(mesh.shape) if mesh is not None else (1,)
    names = tuple(mesh.mesh_dim_names or _default_axis_names(mesh.ndim)) if mesh else ("tp",)
    entries: dict[int, TensorLayout] = {}
    for kind, name, t in tensors:
        if t is None:
            continue
        key = id(t)
        if key in entries:
            e = entries[key]
            entries[key] = TensorLayout(e.name, e.kind, e.style, e.info, (*e.aliases, name))
            continue
        if isinstance(t, DTensor):
            info = sharding_info(t)
        else:
            info = layout_info(tuple(t.shape), t.dtype, mesh_shape, (REPLICATE,) * len(mesh_shape),
                               names)
        entries[key] = TensorLayout(name, kind, None, info)
    return ModelLayout(type(module).__name__, mesh_shape, names, tuple(entries.values()))


def dtype_name(dtype: torch.dtype) -> str:
    return {torch.bfloat16: "bf16", torch.float16: "f16", torch.float32: "f32",
            torch.float64: "f64"}.get(dtype, str(dtype).removeprefix("torch."))


def format_box(box: Box) -> str:
    return "[" + ", ".join(f"{s.start}:{s.stop}" for s in box) + "]"


__all__ = [
    "ModelLayout",
    "ShardingInfo",
    "Split",
    "TensorLayout",
    "dtype_name",
    "format_box",
    "layout_info",
    "model_layout",
    "sharding_info",
]
