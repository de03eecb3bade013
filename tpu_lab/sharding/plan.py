"""Plan tensor parallelism without weights: which chip holds what, HBM per chip, does it fit.

The model is built on the meta device from its config (no weights, no download); its own
tensor-parallel plan (transformers ``tp_plan`` / ``base_model_tp_plan``, a diffusers ``_tp_plan``)
or one you pass says how each Linear is split. The placements mirror what transformers'
``apply_tensor_parallelism``, diffusers' ``apply_tensor_parallel`` and torch's
``parallelize_module`` do with each style; a size that a style would split unevenly (attention
heads, hidden sizes) is refused with the parameter, dimension, size and chip count.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import torch

from .._drawn import Drawn
from ..errors import ShardingError, TopologyError
from ..hardware.topology import GENERATIONS, Generation, parse_topology
from .info import REPLICATE, ModelLayout, Split, TensorLayout, layout_info, shard
from .meta import load_meta_model

_COLWISE = {"colwise", "colwise_rep", "colwise_gather_output"}
_ROWWISE = {"rowwise", "rowwise_rep", "rowwise_split_input"}
_REPLICATED = {
    "replicate", "sequence_parallel", "replicated_with_grad_allreduce", "all_reduce",
    "local_params", "mla_kv_a_proj", "moe_identity_expert", "moe_tp_experts",
}
KNOWN_STYLES = sorted(
    _COLWISE | _ROWWISE | _REPLICATED
    | {"packed_colwise", "packed_rowwise", "embedding_rowwise", "embedding_colwise"}
)
_QUERY = {"q_proj", "to_q", "add_q_proj", "query", "wq", "q"}
_KEY_VALUE = {"k_proj", "v_proj", "to_k", "to_v", "add_k_proj", "add_v_proj", "key", "value",
              "wk", "wv", "k", "v"}
_MLP = ("up_proj", "gate_proj", "gate_up_proj", "fc1", "c_fc", "proj_mlp")
_FUSED_QKV = {"qkv_proj", "query_key_value", "to_qkv", "c_attn", "Wqkv", "qkv"}


def style_name(style) -> str:
    """A plan value as text: strings as they are, style objects by class name."""
    return style if isinstance(style, str) else type(style).__name__


def _split_for(style, module: torch.nn.Module, pname: str, param: torch.Tensor, path: str):
    """The placement ``style`` gives parameter ``pname`` of ``module`` (None: replicated)."""
    ndim = param.dim()
    name = style_name(style)
    embedding = isinstance(module, torch.nn.Embedding)
    if name in _COLWISE or name == "ColwiseParallel":
        if name == "ColwiseParallel" and embedding:
            return shard(1)
        return shard(max(ndim - 2, 0))
    if name in _ROWWISE or name == "RowwiseParallel":
        if name == "RowwiseParallel" and embedding:
            return shard(0)
        return REPLICATE if ndim == 1 else shard(ndim - 1)
    if name == "embedding_rowwise":
        return shard(0)
    if name == "embedding_colwise":
        return shard(1)
    if name == "packed_colwise":  # transformers: gate and up fused, split_factor 2
        return shard(0) if ndim == 1 else Split("shard", ndim - 2, split_factor=2)
    if name == "packed_rowwise":
        return REPLICATE if ndim == 1 else Split("shard", ndim - 1, split_factor=2)
    if name in ("PackedColwiseParallel", "PackedRowwiseParallel"):  # diffusers markers
        col = name == "PackedColwiseParallel"
        if not col and pname != "weight":
            return REPLICATE
        dim = 0 if col else 1
        attr = "_tp_packed_col_blocks" if col else "_tp_packed_row_blocks"
        blocks = style.blocks or getattr(module, attr, None)
        if not blocks:
            raise ShardingError(f"'{path}' uses {name} but has no blocks: set `{attr}` on it.")
        unit, rest = divmod(param.shape[dim], sum(blocks))
        if rest:
            raise ShardingError(
                f"'{path}': fused blocks {list(blocks)} do not divide dim {dim} of size "
                f"{param.shape[dim]}."
            )
        return Split("shard", dim, blocks=tuple(b * unit for b in blocks))
    if name in _REPLICATED or name in ("SequenceParallel", "PrepareModuleInput",
                                       "PrepareModuleOutput", "PrepareModuleInputOutput"):
        return None
    raise ShardingError(
        f"Unknown tensor-parallel style {name!r} for '{path}'. Known styles: "
        f"{', '.join(KNOWN_STYLES)} (or torch's ColwiseParallel/RowwiseParallel objects, "
        "diffusers' PackedColwiseParallel/PackedRowwiseParallel)."
    )


def model_tp_plan(model: torch.nn.Module) -> dict:
    """The model's own plan: transformers ``model.tp_plan`` (class ``_tp_plan`` plus the
    config's ``base_model_tp_plan``), a diffusers class ``_tp_plan``, else empty."""
    plan = getattr(model, "tp_plan", None)
    if not isinstance(plan, dict) or not plan:
        plan = getattr(type(model), "_tp_plan", None) or getattr(model, "_tp_plan", None)
    return dict(plan or {})


def _pattern(key: str) -> re.Pattern:
    return re.compile("\\.".join("[^.]+" if a == "*" else re.escape(a) for a in key.split(".")))


def match_plan(model: torch.nn.Module, tp_plan: dict) -> dict[str, tuple[str, object]]:
    """Module or parameter name -> (plan key, style) for every name a plan entry matches; ``*``
    stands for one name part, and a key may leave out the model's ``base_model_prefix``. A key
    that matches nothing is a :class:`ShardingError`."""
    modules = dict(model.named_modules())
    params = dict(model.named_parameters(remove_duplicate=False))
    prefix = getattr(model, "base_model_prefix", "") or ""
    out: dict[str, tuple[str, object]] = {}
    for key, style in tp_plan.items():
        hits = _match(key, modules, params)
        if not hits and prefix and not key.startswith(prefix + "."):
            hits = _match(f"{prefix}.{key}", modules, params)
        if not hits:
            example = next((n for n in modules if n.count(".") >= 2), next(iter(params), ""))
            raise ShardingError(
                f"tp_plan key {key!r} matches no module or parameter of "
                f"{type(model).__name__}; names look like {example!r} ('*' stands for one part, "
                "such as a layer number)."
            )
        out.update(dict.fromkeys(hits, (key, style)))
    return out


def resolve_plan(model: torch.nn.Module, tp_plan: dict) -> dict[str, tuple[str, object]]:
    """Parameter name -> (plan key, style) for every parameter a plan entry covers: the
    parameters it names, and the own parameters of the modules it names."""
    modules = dict(model.named_modules())
    out: dict[str, tuple[str, object]] = {}
    for name, key_style in match_plan(model, tp_plan).items():
        if name not in modules:
            out[name] = key_style
            continue
        for pname, _ in modules[name].named_parameters(recurse=False):
            out[f"{name}.{pname}" if name else pname] = key_style
    return out


def _match(key: str, modules: dict, params: dict) -> list[str]:
    if "*" not in key:
        return [key] if key in modules or key in params else []
    rx = _pattern(key)
    return [n for n in (*modules, *params) if rx.fullmatch(n)]


def _config(model):
    config = getattr(model, "config", None)
    if config is not None and hasattr(config, "get_text_config"):
        config = config.get_text_config()
    return config


def _cfg(config, *names, default=None):
    """The first of ``names`` the config sets; a per-block list (SDXL's ``attention_head_dim``
    is [5, 10, 20]) counts as its largest entry."""
    for n in names:
        value = config.get(n) if isinstance(config, dict) else getattr(config, n, None)
        if isinstance(value, (list, tuple)) and value and all(isinstance(v, int) for v in value):
            return max(value)
        if value is not None:
            return value
    return default


def _check_heads(model, covered: dict, chips: int) -> None:
    """Refuse colwise-split attention projections whose heads do not divide over the chips."""
    config = _config(model)
    if config is None or chips == 1:
        return
    heads = _cfg(config, "num_attention_heads", "num_heads", "n_head")
    kv_heads = _cfg(config, "num_key_value_heads", "num_kv_heads", default=heads)
    for pname, (key, style) in covered.items():
        if not pname.endswith("weight") or style_name(style) not in (
            _COLWISE | {"ColwiseParallel", "packed_colwise", "PackedColwiseParallel"}
        ):
            continue
        module_atom = pname.rsplit(".", 2)[-2] if "." in pname else pname
        for names, count, what in (
            (_QUERY | _FUSED_QKV, heads, "num_attention_heads"),
            (_KEY_VALUE | _FUSED_QKV, kv_heads, "num_key_value_heads"),
        ):
            if module_atom in names and count and count % chips:
                same = sum(1 for p, (k, _) in covered.items() if k == key and p != pname)
                more = f" (and {same} more from plan key {key!r})" if same else ""
                raise ShardingError(
                    f"Cannot split {pname} over {chips} chips: {style_name(style)!r} splits dim 0 "
                    f"into per-chip heads, but {what}={count} does not divide by {chips}{more}. "
                    f"Use a chip count that divides {count}: {_divisors(count)}."
                )


def check_heads(model: torch.nn.Module, chips: int, tp_plan: dict | None = None) -> None:
    """Raise the planner's :class:`ShardingError` when ``model``'s plan (its own, updated with
    ``tp_plan``) splits attention heads that do not divide over ``chips`` (a cluster asks this
    of a model whose tensor-parallel forward failed on every rank)."""
    plan = model_tp_plan(model)
    plan.update(tp_plan or {})
    if plan and chips > 1:
        _check_heads(model, resolve_plan(model, plan), chips)


def _divisors(n: int) -> str:
    found = [d for d in range(1, min(n, 64) + 1) if n % d == 0]
    return ", ".join(map(str, found)) + (", ..." if n > 64 else "")


def plan_layout(
    model: torch.nn.Module, chips: int, tp_plan: dict | None = None, dtype=None
) -> ModelLayout:
    """The layout of ``model`` (meta or real) on a 1-D mesh of ``chips`` under its own plan
    updated with ``tp_plan``. Floating-point parameters count as ``dtype`` when given (buffers
    keep theirs, as transformers keeps rotary frequencies in float32)."""
    plan = model_tp_plan(model)
    plan.update(tp_plan or {})
    if not plan and chips > 1:
        raise ShardingError(
            f"{type(model).__name__} has no tensor-parallel plan (no tp_plan, base_model_tp_plan "
            "or _tp_plan). Pass one: tp_plan={'layers.*.mlp.up_proj': 'colwise', "
            "'layers.*.mlp.down_proj': 'rowwise', ...}."
        )
    covered = resolve_plan(model, plan) if chips > 1 else {}
    _check_heads(model, covered, chips)
    modules = dict(model.named_modules())
    mesh, names = (chips,), ("tp",)
    entries: dict[int, TensorLayout] = {}
    problems: list[str] = []
    tensors = [("parameter", n, t) for n, t in model.named_parameters(remove_duplicate=False)]
    tensors += [("buffer", n, t) for n, t in model.named_buffers(remove_duplicate=False)]
    for kind, name, t in tensors:
        mod_name, _, pname = name.rpartition(".")
        key_style = covered.get(name)
        split = style = None
        if key_style is not None:
            style = style_name(key_style[1])
            split = _split_for(key_style[1], modules[mod_name], pname, t, name)
        split = split or REPLICATE
        if split.kind == "shard":
            problems += _divides(name, style, t.shape, split, chips)
        floating = kind == "parameter" and t.is_floating_point()
        use = dtype if dtype is not None and floating else t.dtype
        info = layout_info(tuple(t.shape), use, mesh, (split,), names)
        old = entries.get(id(t))
        if old is not None:
            if style is not None and old.info.placements != info.placements:
                raise ShardingError(
                    f"{name} is the same tensor as {old.name} (tied weights) but the plan places "
                    f"it {info.placements[0]} and {old.name} {old.info.placements[0]}; give both "
                    "the same style."
                )
            entries[id(t)] = TensorLayout(old.name, old.kind, old.style or style, old.info,
                                          (*old.aliases, name))
            continue
        entries[id(t)] = TensorLayout(name, kind, style, info)
    if problems:
        extra = f" ({len(problems) - 1} more like it)" if len(problems) > 1 else ""
        raise ShardingError(problems[0] + extra)
    return ModelLayout(type(model).__name__, mesh, names, tuple(entries.values()))


def _divides(name, style, shape, split: Split, chips: int) -> list[str]:
    dim = split.dim % len(shape)
    sizes = split.blocks or ((shape[dim] // split.split_factor,) * split.split_factor
                             if split.split_factor else (shape[dim],))
    bad = [s for s in sizes if s % chips]
    if not bad:
        return []
    what = f"a fused block of size {bad[0]}" if len(sizes) > 1 else f"size {shape[dim]}"
    return [
        f"Cannot split {name} (shape {tuple(shape)}) over {chips} chips: {style!r} splits "
        f"dim {dim}, {what}, which does not divide by {chips}. Use a chip count that divides "
        f"{bad[0]}: {_divisors(bad[0])}."
    ]


@dataclass(frozen=True)
class Plan(Drawn):
    """A tensor-parallel plan computed without weights: the layout and the weights each chip
    holds; with a step (``batch`` and ``seq`` or ``image_size``), :meth:`estimate` gives its
    time and peak HBM per chip, :meth:`max_batch` the largest batch that fits (its picture:
    :class:`tpu_lab.views.sharding.PlanView`; its figure: :func:`tpu_lab.views.figure`)."""

    model: str
    source: str
    chips: int
    generation: Generation
    layout: ModelLayout
    dtype: torch.dtype
    batch: int | None = None
    seq: int | None = None
    notes: tuple[str, ...] = field(default=())
    hosts: int = 1
    data: int = 1  # data-parallel replicas of the (tensor x fsdp) mesh
    fsdp: int = 1  # chips that shard weights, gradients and optimizer state between them
    image_size: tuple[int, int] | None = None
    frames: int | None = None
    obj: object = field(default=None, repr=False, compare=False)  # what was planned
    remat: str = "none"  # activation checkpointing of a training step (sharding.remat)
    optimizer: str = "adamw"  # the optimizer of a training step: "adamw" or "sgd"

    @property
    def total_chips(self) -> int:
        """Every chip the plan uses: tensor parallel x FSDP x data parallel."""
        return self.chips * self.fsdp * self.data

    @property
    def local_batch(self) -> int | None:
        """The batch one tensor-parallel group runs (``batch / (data * fsdp)``)."""
        return None if self.batch is None else self.batch // (self.data * self.fsdp)

    def estimate(self, task: str = "forward", *, mode: str = "compiled",
                 text_tokens: int | None = None, remat: str | None = None,
                 optimizer: str | None = None):
        """One ``task`` of the plan's step on its chips, estimated on an idealised chip
        (:mod:`tpu_lab.sharding.step_estimate`): its time and one chip's peak HBM
        (``.peak_hbm_bytes``, what fills it in ``.memory``), run in ``mode`` ("eager",
        "fuse" or "compiled"). Tasks: "forward" (``batch x seq`` tokens, or one denoising
        step at ``image_size``), "train" (forward, backward, optimizer step, with the plan's
        ``remat`` and ``optimizer`` unless given) or "decode" (one new token for each of
        ``batch`` sequences after ``seq`` cached ones)."""
        from .step_estimate import estimate_plan

        return estimate_plan(self, task, mode=mode, text_tokens=text_tokens, remat=remat,
                             optimizer=optimizer)

    def max_batch(self, task: str = "train", *, remat: str | tuple[str, ...] | None = None,
                  mode: str = "compiled", limit: int = 1 << 16):
        """The largest global batch whose step fits in each chip's HBM, for each ``remat``
        choice (default: every one for "train", "none" otherwise), and what fills HBM at it
        (:mod:`tpu_lab.sharding.batch_limit`)."""
        from .batch_limit import max_batch

        return max_batch(self, task, remat=remat, mode=mode, limit=limit)

    @property
    def topology(self) -> str | None:
        """The topology name (``'v6e-4'``, ``'v6e-16'``) when the generation has ``chips``
        on ``hosts`` hosts."""
        from ..hardware.topology import make_topology

        try:
            return make_topology(self.generation.name, self.chips, self.hosts).name
        except TopologyError:
            return None

    @property
    def chips_per_host(self) -> int:
        return self.chips // self.hosts

    @property
    def weight_bytes_per_host(self) -> tuple[int, ...]:
        """The weights each host's chips hold together."""
        per = self.weight_bytes_per_chip
        n = self.chips_per_host
        return tuple(sum(per[h * n:(h + 1) * n]) for h in range(self.hosts))

    @property
    def hbm_per_chip(self) -> int:
        return self.generation.hbm_per_device

    @property
    def weight_bytes_per_chip(self) -> tuple[int, ...]:
        """Weights at rest per chip: the tensor-parallel shard, cut ``fsdp`` ways by FSDP."""
        return tuple(-(-b // self.fsdp) for b in self.layout.bytes_per_chip)

    @property
    def weights_fit(self) -> bool:
        """Whether the weights alone fit in each chip's HBM (a step's peak, with its
        activations, gradients and optimizer state: :meth:`estimate`)."""
        return max(self.weight_bytes_per_chip) <= self.hbm_per_chip


def generation_and_chips(generation: str, chips: int | None) -> tuple[Generation, int, int]:
    """A generation (``'v6e'``: ``chips`` of it, 4 by default, on one host where it has that
    many, else on its pod slice's hosts) or a topology (``'v6e-16'``: its chips and hosts,
    which ``chips`` may repeat); returns (generation, chips, hosts)."""
    from ..hardware.slices import multi_host

    gen = GENERATIONS.get(str(generation).strip().lower())
    if gen is None:
        topo = parse_topology(str(generation))
        if chips is not None and chips != topo.devices:
            raise TopologyError(
                f"generation={generation!r} has {topo.devices} chips but chips={chips}; "
                "pass one of them."
            )
        return topo.generation, topo.devices, topo.hosts
    if chips is None:
        chips = 4
    if isinstance(chips, bool) or not isinstance(chips, int) or chips < 1:
        raise ShardingError(f"chips must be a positive integer, got {chips!r}.")
    pods = [h for d, h in multi_host(gen.name) if d == chips]
    return gen, chips, 1 if chips in gen.topologies or not pods else pods[0]


def plan(
    obj,
    chips: int | None = None,
    generation: str = "v6e",
    batch: int | None = None,
    seq: int | None = None,
    tp_plan: dict | None = None,
    *,
    dtype: torch.dtype | None = None,
    image_size: tuple[int, int] | None = None,
    frames: int | None = None,
    data: int = 1,
    fsdp: int = 1,
    remat: str = "none",
    optimizer: str = "adamw",
) -> Plan:
    """Plan ``obj`` (config, model or directory) over ``chips`` chips (default 4, or the count
    in ``generation='v6e-8'``) of ``generation``: weights per chip, and the step of ``batch``
    x ``seq`` tokens (``image_size=(h, w)`` for image models: ``h/16 * w/16`` image tokens, as
    with an 8x VAE and 2x2 patches; ``frames=`` for video models) that :meth:`Plan.estimate`
    estimates (time, peak HBM) and :meth:`Plan.max_batch` grows. ``tp_plan`` entries update the
    model's own plan; ``dtype`` (e.g. ``torch.bfloat16``) overrides the floating-point weight
    dtype. ``chips`` is the tensor-parallel group; ``fsdp`` more chips shard weights,
    gradients and optimizer state (MaxText's ``ici_fsdp``), and ``data`` replicas of that mesh
    split the batch: ``chips * fsdp * data`` chips in all, and ``batch`` is the global batch.
    A training step checkpoints its blocks' activations as ``remat`` says ("none", "full",
    "dots": :mod:`tpu_lab.sharding.remat`) and updates the weights with ``optimizer``
    ("adamw", "sgd")."""
    gen, chips, hosts = generation_and_chips(generation, chips)
    for name, value in (("data", data), ("fsdp", fsdp)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ShardingError(f"{name} must be a positive integer, got {value!r}.")
    from .remat import check as check_remat
    from .step_estimate import OPTIMIZERS

    check_remat(remat)
    if optimizer not in OPTIMIZERS:
        raise ShardingError(f"optimizer must be one of {', '.join(OPTIMIZERS)}; got "
                            f"{optimizer!r}.")
    for name, value in (("batch", batch), ("seq", seq), ("frames", frames)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or value < 1):
            raise ShardingError(f"{name} must be a positive whole number, got {value!r}: "
                                f"{_examples[name]}.")
    model, source = load_meta_model(obj)
    if image_size is not None:
        height, width = _image_size(model, image_size)
        seq = (height // 16) * (width // 16)
        batch = batch or 1
    elif seq is not None:
        _warn_beyond_positions(model, seq)
    layout = plan_layout(model, chips, tp_plan, dtype)
    floating = [e.info.dtype for e in layout.entries if e.kind == "parameter"
                and e.info.dtype.is_floating_point]
    used = dtype or (max(set(floating), key=floating.count) if floating else torch.float32)
    notes = []
    if batch is not None and seq is None:
        raise ShardingError("Pass seq with batch (or image_size) for the work of one step, "
                            "e.g. batch=8, seq=2048.")
    replicas = data * fsdp
    if batch is not None and batch % replicas:
        raise ShardingError(
            f"batch={batch} does not split over data={data} x fsdp={fsdp} = {replicas} "
            f"replicas; pass a multiple of {replicas} (for example "
            f"{replicas * max(1, batch // replicas)})."
        )
    if chips not in gen.topologies and hosts == 1:
        notes.append(f"TPU {gen.name} has no {chips}-chip host topology "
                     f"(one-host counts: {', '.join(map(str, gen.topologies))})")
    if hosts > 1:
        notes.append(f"tensor parallelism over all {chips} chips exchanges activations across "
                     f"{hosts} hosts at every layer; keep it within a host ({chips // hosts} "
                     "chips) and replicate across hosts (tpu_lab.sharding.hybrid)")
    if replicas > 1:
        notes.append(f"{chips * replicas} chips in all: tensor parallel {chips} x FSDP {fsdp} "
                     f"x data parallel {data}; weights per chip are the tensor-parallel shard "
                     f"cut {fsdp} ways")
    return Plan(type(model).__name__, source, chips, gen, layout, used, batch, seq,
                tuple(notes), hosts, data, fsdp, image_size, frames, obj, remat, optimizer)


_examples = {"batch": "sequences (or images) per step, e.g. batch=8",
             "seq": "tokens per sequence, e.g. seq=2048",
             "frames": "a video's frames, e.g. frames=81"}


def _image_size(model, image_size) -> tuple[int, int]:
    """``image_size`` as (height, width) in pixels, if the model can take it."""
    from .step_inputs import image_multiple

    try:
        height, width = image_size
        valid = all(isinstance(v, int) and not isinstance(v, bool) and v > 0
                    for v in (height, width))
    except (TypeError, ValueError):
        valid = False
    if not valid:
        raise ShardingError(f"image_size must be (height, width) in pixels, e.g. (1024, 1024); "
                            f"got {image_size!r}.")
    multiple, why = image_multiple(model)
    if height % multiple or width % multiple:
        near = "x".join(str(max(multiple, round(v / multiple) * multiple))
                        for v in (height, width))
        raise ShardingError(
            f"image_size {height}x{width} does not suit {type(model).__name__}: height and "
            f"width must be multiples of {multiple} ({why}); for example {near}."
        )
    return height, width


def _warn_beyond_positions(model, seq: int) -> None:
    config = _config(model)
    limit = _cfg(config, "max_position_embeddings", "n_positions") if config else None
    if isinstance(limit, int) and seq > limit:
        import warnings

        warnings.warn(
            f"seq={seq} is longer than {type(config).__name__}'s max_position_embeddings="
            f"{limit}: the model was not built for it (its position embeddings end at {limit}); "
            "the plan counts it anyway. Plan with seq <= the limit, or a config that raises it.",
            UserWarning, stacklevel=3,
        )
