"""N simulated chips in one process: tensor-parallel forward passes with real shards.

PyTorch's ``LocalTensorMode`` runs every op once per simulated rank on that rank's shard and
turns collectives into the equivalent local arithmetic; a "fake" process group gives DTensor the
ranks and groups it asks for. The mesh runs on the CPU: the bundled "tpu" device drives one chip
per process, as TorchTPU does, so N chips in one process are N CPU shards (the per-chip HBM
shown is what each shard would take, against the capacity of the chosen generation). For one
process per chip on its own simulated "tpu", use ``tpu_lab.launch.cluster``.
"""

from __future__ import annotations

import copy
import dataclasses
import warnings
from collections import Counter
from dataclasses import dataclass, field

import torch

from .._drawn import Drawn
from ..errors import ShardingError
from ..hardware.topology import Generation
from .info import ModelLayout, model_layout
from .plan import generation_and_chips, match_plan, model_tp_plan, plan_layout

_FAKE = {"registered": False}


def _register_fake_backend() -> None:
    """The fake process group (no communication; LocalTensorMode does the arithmetic)."""
    if _FAKE["registered"]:
        return
    import torch.distributed as dist
    from torch._C._distributed_c10d import FakeProcessGroup

    def create(common, backend_opts):
        return FakeProcessGroup._create_internal(common.group_rank, common.group_size,
                                                 backend_opts)

    dist.Backend.register_backend("fake", create, extended_api=True, devices=["cpu"])
    _FAKE["registered"] = True


def tolerance(dtype: torch.dtype) -> tuple[float, float]:
    """(rtol, atol) of a TP=N result against TP=1: each chip sums its slice of a rowwise
    matmul's inner dimension, rounds it to ``dtype``, and the all-reduce adds the N partial sums,
    so results differ from the single sum by a few rounding steps of ``dtype`` per layer."""
    if dtype == torch.bfloat16:
        return 2e-2, 2e-2
    if dtype == torch.float16:
        return 5e-3, 5e-3
    return 1e-4, 1e-5


# The collectives by operator: the functional ones (what DTensor issues, as
# "_c10d_functional::all_reduce") and the process group's ("c10d::allreduce_"), by the name shown.
_COLLECTIVE_NAMESPACES = {"_c10d_functional", "c10d_functional", "_c10d_functional_autograd",
                          "c10d", "_dtensor"}
_COLLECTIVES = {
    "all_reduce": "all_reduce", "all_reduce_coalesced": "all_reduce", "allreduce": "all_reduce",
    "allreduce_coalesced": "all_reduce",
    "all_gather_into_tensor": "all_gather", "all_gather_into_tensor_coalesced": "all_gather",
    "allgather": "all_gather", "_allgather_base": "all_gather", "allgather_coalesced": "all_gather",
    "allgather_into_tensor_coalesced": "all_gather",
    "reduce_scatter_tensor": "reduce_scatter", "reduce_scatter_tensor_coalesced": "reduce_scatter",
    "reduce_scatter": "reduce_scatter", "_reduce_scatter_base": "reduce_scatter",
    "all_to_all_single": "all_to_all", "alltoall": "all_to_all", "alltoall_base": "all_to_all",
    "shard_dim_alltoall": "all_to_all",
    "broadcast": "broadcast", "gather": "gather", "scatter": "scatter", "reduce": "reduce",
}


def _comm_name(op_name: str) -> str | None:
    """The collective an operator name ("c10d::allreduce_") stands for, or None."""
    namespace, _, name = op_name.partition("::")
    if namespace not in _COLLECTIVE_NAMESPACES:
        return None
    return _COLLECTIVES.get(name.rstrip("_"))


def _collective_counter():
    """A dispatch mode counting the collectives run under it (``.counts``), as torch's
    ``CommDebugMode`` does but without its module tracker, which hooks every module it sees and
    breaks on a module called more than once in a forward (transformers 5.25's Llama calls one
    hub-kernel function module per layer): that forward fails, and hooks left behind break every
    later forward of the model."""
    from torch.distributed.tensor import DTensor
    from torch.utils._python_dispatch import TorchDispatchMode

    class CollectiveCounter(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.counts: Counter = Counter()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if any(issubclass(t, DTensor) for t in types):
                return NotImplemented  # DTensor turns the op into local ops and collectives first
            out = func(*args, **(kwargs or {}))
            name = _comm_name(func.name())
            if name is not None:
                self.counts[name] += 1
            return out

    return CollectiveCounter()


class SimulatedMesh:
    """A 1-D tensor-parallel mesh of ``chips`` simulated chips of ``generation`` in this
    process; use it as a context manager::

        with SimulatedMesh(4) as mesh:
            mesh.parallelize(model)        # the model's own tp_plan, or tp_plan=...
            out = mesh.run(model, ids)     # LocalTensor: one result per chip
        mesh.comms                         # {'all_reduce': 5, 'all_gather': 1}
    """

    def __init__(self, chips: int | None = None, generation: str = "v6e") -> None:
        self.generation: Generation
        self.generation, self.chips, _ = generation_and_chips(generation, chips)
        self.comms: Counter[str] = Counter()
        self.device_mesh = None
        self._mode = None
        self._owns_group = False

    def __enter__(self) -> SimulatedMesh:
        import torch.distributed as dist
        from torch.distributed._local_tensor import LocalTensorMode
        from torch.distributed.device_mesh import DeviceMesh

        if dist.is_initialized():
            raise ShardingError(
                f"torch.distributed is already initialised in this process (backend "
                f"{dist.get_backend()!r}, world size {dist.get_world_size()}); the one-process "
                "mesh needs its own fake process group. Use a fresh process, or run on the "
                "ranks of tpu_lab.launch.cluster."
            )
        _register_fake_backend()
        dist.init_process_group("fake", rank=0, world_size=self.chips, store=dist.HashStore())
        self._owns_group = True
        try:
            self._mode = LocalTensorMode(self.chips)
            self._mode.__enter__()
            self.device_mesh = DeviceMesh("cpu", torch.arange(self.chips), mesh_dim_names=("tp",))
        except BaseException:
            if self._mode is not None:
                self._mode.__exit__(None, None, None)
                self._mode = None
            dist.destroy_process_group()
            self._owns_group = False
            raise
        return self

    def __exit__(self, *exc) -> None:
        import torch.distributed as dist

        try:
            if self._mode is not None:
                self._mode.__exit__(*exc)
        finally:
            self._mode = None
            if self._owns_group:
                dist.destroy_process_group()
                self._owns_group = False

    def _need_open(self) -> None:
        if self._mode is None:
            raise ShardingError("Use the mesh inside `with SimulatedMesh(...) as mesh:`.")

    def parallelize(self, model: torch.nn.Module, tp_plan: dict | None = None):
        """Shard ``model`` in place with its own plan updated with ``tp_plan``: transformers
        models through transformers' ``apply_tensor_parallelism`` (every style it knows), other
        modules through torch's ``parallelize_module`` ('colwise'/'rowwise' strings, torch
        ParallelStyle objects). The plan is checked first, like :func:`plan`."""
        self._need_open()
        if any(p.is_meta for p in model.parameters()):
            raise ShardingError("The model is on the meta device: a mesh run needs weights. "
                                "Use tpu_lab.sharding.plan() to plan without weights.")
        plan_layout(model, self.chips, tp_plan)  # refuses plans that do not divide
        plan = model_tp_plan(model)
        plan.update(tp_plan or {})
        concrete = {name: style for name, (_, style) in match_plan(model, plan).items()}
        self._replicate(model)
        modules = dict(model.named_modules())
        if hasattr(model, "_resolve_parallel_plans"):
            from transformers.distributed.tensor_parallel import apply_tensor_parallelism

            expanded = {}  # like transformers: a module's own parameters, then its forward
            for name, style in concrete.items():
                if name in modules:
                    for pname, _ in modules[name].named_parameters(recurse=False):
                        expanded[f"{name}.{pname}" if name else pname] = style
                expanded[name] = style
            apply_tensor_parallelism(model, self.device_mesh, expanded)
        else:
            from torch.distributed.tensor.parallel import parallelize_module

            parallelize_module(model, self.device_mesh,
                               {n: _torch_style(s, n) for n, s in concrete.items()})
        return model

    def replicated(self, t: torch.Tensor) -> torch.Tensor:
        """``t`` as a tensor every chip holds a copy of (a LocalTensor)."""
        self._need_open()
        return self._mode.rank_map(lambda _: t.detach().clone())

    def _replicate(self, model: torch.nn.Module) -> None:
        # Every chip starts with its own copy of each weight. (distribute_tensor of a plain
        # tensor under LocalTensorMode gives every rank rank 0's _StridedShard slice in
        # torch 2.13; from a LocalTensor each rank takes its own.)
        from torch.distributed.tensor import DTensor

        for module in model.modules():
            for name, p in module._parameters.items():
                if p is not None and not isinstance(p, DTensor):
                    module._parameters[name] = torch.nn.Parameter(
                        self.replicated(p), requires_grad=p.requires_grad)
            for name, b in module._buffers.items():
                if b is not None and not isinstance(b, DTensor):
                    module._buffers[name] = self.replicated(b)

    def run(self, fn, *args, **kwargs):
        """Call ``fn(*args, **kwargs)`` on every chip (no autograd), counting collectives."""
        self._need_open()
        with _collective_counter() as counter, torch.no_grad(), warnings.catch_warnings():
            # DTensor's module hooks warn about backward hooks on non-tensor outputs: no autograd
            warnings.filterwarnings("ignore", "For backward hooks to be called")
            out = fn(*args, **kwargs)
        self.comms.update(counter.counts)
        return out


def _torch_style(style, name: str):
    from torch.distributed.tensor.parallel import ColwiseParallel, ParallelStyle, RowwiseParallel

    if isinstance(style, ParallelStyle):
        return style
    if style == "colwise":
        return ColwiseParallel()
    if style == "rowwise":
        return RowwiseParallel()
    if type(style).__name__ in ("PackedColwiseParallel", "PackedRowwiseParallel"):
        from diffusers.hooks.tensor_parallel import _styles

        return _styles({name: style})[name]
    raise ShardingError(
        f"Style {style!r} for '{name}' needs a transformers model; on other modules use "
        "'colwise', 'rowwise' or torch.distributed.tensor.parallel style objects."
    )


def per_chip(t) -> list[torch.Tensor]:
    """The chips' tensors of a LocalTensor or of a DTensor's local shard (CPU tensors)."""
    from torch.distributed._local_tensor import LocalTensor
    from torch.distributed.tensor import DTensor

    if isinstance(t, DTensor):
        t = t._local_tensor
    if isinstance(t, LocalTensor):
        return [t._local_tensors[r] for r in sorted(t._local_tensors)]
    return [t]


def _first_tensor(out):
    if isinstance(out, torch.Tensor):
        return out
    if hasattr(out, "logits"):
        return out.logits
    if hasattr(out, "sample"):
        return out.sample
    if isinstance(out, (tuple, list)) or hasattr(out, "to_tuple"):
        return _first_tensor(out[0])
    raise ShardingError(f"The model returned {type(out).__name__}; expected tensors.")


@dataclass(frozen=True, eq=False)
class MeshRun(Drawn):
    """A tensor-parallel forward on the one-process mesh next to the unsharded model (its
    picture: :class:`tpu_lab.views.sharding.MeshRunView`)."""

    model: str
    chips: int
    generation: Generation
    layout: ModelLayout
    shard_bytes_per_chip: tuple[int, ...]  # summed from the real local shards
    comms: tuple[tuple[str, int], ...]
    outputs: tuple[torch.Tensor, ...] = field(repr=False)  # one per chip
    reference: torch.Tensor = field(repr=False)
    rtol: float
    atol: float

    @property
    def max_abs_diff(self) -> float:
        return max(float((o.float() - self.reference.float()).abs().max()) for o in self.outputs)

    @property
    def matches(self) -> bool:
        return all(torch.allclose(o, self.reference, rtol=self.rtol, atol=self.atol)
                   for o in self.outputs)

    @property
    def hbm_per_chip(self) -> int:
        return self.generation.hbm_per_device


def simulate(model: torch.nn.Module, *args, chips: int | None = None, generation: str = "v6e",
             tp_plan: dict | None = None, **kwargs) -> MeshRun:
    """Run ``model(*args, **kwargs)`` unsharded and tensor-parallel over ``chips`` simulated
    chips (a copy of the model on the CPU; ``model`` is left as it is) and compare."""
    cpu = copy.deepcopy(model).to("cpu").eval()
    args = tuple(a.to("cpu") if isinstance(a, torch.Tensor) else a for a in args)
    kwargs = {k: v.to("cpu") if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
    with torch.no_grad():
        reference = _first_tensor(cpu(*args, **kwargs))
    with SimulatedMesh(chips, generation) as mesh:
        styles = {e.name: e.style for e in plan_layout(cpu, mesh.chips, tp_plan).entries}
        mesh.parallelize(cpu, tp_plan)
        out = _first_tensor(mesh.run(cpu, *args, **kwargs))
        outputs = tuple(t.clone() for t in per_chip(out))
        if len(outputs) == 1:
            outputs *= mesh.chips
        layout = model_layout(cpu)
        layout = dataclasses.replace(layout, entries=tuple(
            dataclasses.replace(e, style=styles.get(e.name)) for e in layout.entries))
        real = [0] * mesh.chips
        for t in [*cpu.parameters(), *cpu.buffers()]:
            shards = per_chip(t)
            for chip in range(mesh.chips):
                real[chip] += shards[chip % len(shards)].nbytes
    rtol, atol = tolerance(reference.dtype)
    return MeshRun(type(model).__name__, mesh.chips, mesh.generation, layout, tuple(real),
                   tuple(sorted(mesh.comms.items())), outputs, reference, rtol, atol)
