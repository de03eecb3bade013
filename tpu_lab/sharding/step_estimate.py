"""A plan's step without weights: the model built on the meta device, run once under a
:class:`~tpu_lab.estimate.trace.Recorder` for the task, each op's share of work on one chip
set from the plan's tensor-parallel layout, the collectives of FSDP and data parallelism
added, and the whole costed as one compiled program (:func:`tpu_lab.estimate.graph.cost`).

- ``forward``: one forward pass (``batch x seq`` tokens; one denoiser or VAE call at the plan's
  ``image_size`` for diffusion models);
- ``train``: that forward, a loss (the model's own for a causal LM with labels, the mean square
  of the output otherwise), the backward, and one AdamW step (PyTorch's fused kernel);
- ``decode``: one new token for each of ``batch`` sequences, attending to a static cache of
  ``seq`` tokens (transformers' ``StaticCache``, as compiled decoding uses).

Parallelism, per step: the tensor-parallel all-reduces come from the ops
(:mod:`tpu_lab.sharding.tp_shares`); FSDP all-gathers the weights for the forward (and again for
the backward) and reduce-scatters the gradients; data parallelism all-reduces the gradients,
over the data-center network when the chips outnumber one pod (``Chip.pod_chips``).
"""

from __future__ import annotations

import copy
import dataclasses
import json
from collections import OrderedDict, defaultdict

import torch

from ..errors import ShardingError
from ..estimate.graph import MODES, cost
from ..estimate.result import Estimate
from ..estimate.trace import Program, Record, Recorder
from ..units import format_bytes
from .meta_run import FusedAttention, balance_experts, use_fused_attention
from .step_inputs import diffusion_step, family, language_step
from .tp_shares import split

TASKS = ("forward", "train", "decode")


def _check(plan, task: str, mode: str) -> None:
    if task not in TASKS:
        raise ShardingError(f"task must be one of {', '.join(TASKS)}; got {task!r}.")
    if mode not in MODES:
        raise ShardingError(f"mode must be one of {', '.join(MODES)}; got {mode!r}.")
    if plan.batch is None:
        raise ShardingError(
            "An estimate needs the work of one step: plan with batch= and seq= (or image_size= "
            "for an image model), e.g. plan(config, chips=4, batch=8, seq=2048)."
        )
    slice_chips = plan.chips * plan.fsdp
    if slice_chips > plan.generation.device.pod_chips:
        raise ShardingError(
            f"tensor parallel {plan.chips} x FSDP {plan.fsdp} = {slice_chips} chips is more "
            f"than one TPU {plan.generation.name} pod ({plan.generation.device.pod_chips} chips); "
            "put the rest in data=."
        )


def _model(plan):
    """The plan's model on the meta device, in the plan's dtype, with fused attention (built
    from a copy of the plan's config, which stays as it was)."""
    from .meta import load_meta_model

    obj = plan.obj if isinstance(plan.obj, torch.nn.Module) else copy.deepcopy(plan.obj)
    model, _ = load_meta_model(obj)
    for p in model.parameters():
        if p.is_floating_point() and p.dtype != plan.dtype:
            p.data = p.data.to(plan.dtype)
    if family(model) == "transformers":
        use_fused_attention(model)
    return model


def _shares(plan, model) -> dict[int, float]:
    """id(parameter) -> the share of it one chip holds under the plan's layout."""
    entries = {}
    for e in plan.layout.entries:
        share = e.info.bytes_per_chip[0] / e.info.global_bytes if e.info.global_bytes else 1.0
        for name in (e.name, *e.aliases):
            entries[name] = share
    return {id(p): entries.get(n, 1.0)
            for n, p in model.named_parameters(remove_duplicate=False)}


def _run(plan, model, task: str, text_tokens: int | None):
    """Record ``task`` on ``model``; returns (program, step, params, first optimizer record)."""
    batch, fam = plan.local_batch, family(model)
    if fam == "transformers":
        if plan.seq is None:
            raise ShardingError("Pass seq= (tokens per sequence) to estimate a language model.")
        step = language_step(model, task, batch, plan.seq, plan.dtype)
    elif task == "decode":
        raise ShardingError(f"{type(model).__name__} does not decode tokens; estimate "
                            "'forward' (one denoising step) or 'train'.")
    else:
        step = diffusion_step(model, batch, plan.dtype, plan.image_size, plan.frames,
                              text_tokens)
    params = list({id(p): p for p in model.parameters()}.values())
    shares = _shares(plan, model)
    if task == "decode":  # fill the static cache once, outside the record
        with torch.no_grad(), FusedAttention():
            step.call(model)
    rec = Recorder()
    for p in params:
        rec.program.values[rec.value_of(p)].share = shares.get(id(p), 1.0)
    optimizer_at = None
    with FusedAttention(), rec:
        if task == "train":
            model.train()
            out = step.call(model)
            loss = out if step.labels else out.float().square().mean()
            loss.backward()
            optimizer_at = len(rec.program.records)
            _adamw(rec, params, shares)
        else:
            model.eval()
            with torch.no_grad():
                step.call(model)
    return rec.program, step, params, optimizer_at, shares


def _adamw(rec: Recorder, params, shares: dict[int, float]) -> None:
    """One AdamW step as PyTorch's fused kernel (``_fused_adamw_``) runs it: over the
    parameters, their gradients and two float32 moments, one flat buffer per kind of shard."""
    sizes: dict[tuple[torch.dtype, float], int] = defaultdict(int)
    for p in params:
        sizes[(p.dtype, shares.get(id(p), 1.0))] += p.numel()
    for (dtype, share), n in sizes.items():
        p, g = (torch.empty(n, device="meta", dtype=dtype) for _ in range(2))
        m, v = (torch.empty(n, device="meta", dtype=torch.float32) for _ in range(2))
        for t in (p, g, m, v):
            rec.program.values[rec.value_of(t)].share = share
        torch._fused_adamw_([p], [g], [m], [v], [], [torch.empty((), device="meta")], lr=1e-4,
                            beta1=0.9, beta2=0.999, weight_decay=0.01, eps=1e-8,
                            amsgrad=False, maximize=False)


def _collectives(plan, task: str, weight_bytes: float) -> list[Record]:
    """The per-step collectives of FSDP and data parallelism (``weight_bytes``: the weights
    one tensor-parallel chip computes with)."""
    out = []
    if plan.fsdp > 1:
        gathers = 2 if task == "train" else 1
        out += [Record(None, (), (), collective=("all_gather", plan.fsdp, "ici", weight_bytes))
                for _ in range(gathers)]
        if task == "train":
            out.append(Record(None, (), (), collective=(
                "reduce_scatter", plan.fsdp, "ici", weight_bytes)))
    if plan.data > 1 and task == "train":
        network = "dcn" if plan.total_chips > plan.generation.device.pod_chips else "ici"
        out.append(Record(None, (), (), collective=(
            "all_reduce", plan.data, network, weight_bytes / plan.fsdp)))
    return out


def _verdict(plan, task: str, weight_bytes: float, params) -> str:
    hbm = plan.hbm_per_chip
    if task == "train":
        states = sum(p.numel() for p in params) * _state_bytes() / plan.chips
        need = (2 * weight_bytes + states) / plan.fsdp
        what = "weights, gradients and AdamW's moments (activations not counted)"
    else:
        need = max(plan.bytes_per_chip)
        what = "weights and the activation estimate"
    fits = "fits in" if need <= hbm else "does NOT fit in"
    return f"{fits} HBM: {what} {format_bytes(int(need))} of {format_bytes(hbm)} per chip"


def _state_bytes() -> int:
    from ..estimate.assumed import assumptions

    return assumptions().optimizer_state_bytes


def _title(plan, task: str, step) -> str:
    what = (f"image {plan.image_size[0]}x{plan.image_size[1]}" if plan.image_size else
            f"seq {plan.seq}")
    if plan.frames:
        what += f" x {plan.frames} frames"
    mesh = f"tp {plan.chips}" + (f" x fsdp {plan.fsdp}" if plan.fsdp > 1 else "") + (
        f" x data {plan.data}" if plan.data > 1 else "")
    return (f"{plan.model} {task}: batch {plan.batch} x {what} on {plan.total_chips} x "
            f"{plan.generation.device.product} ({mesh})")


def _fingerprint(obj) -> str | None:
    """A text that equal configs share (None: do not reuse a recording of ``obj``)."""
    if hasattr(obj, "to_json_string"):
        return f"{type(obj).__name__}:{obj.to_json_string()}"
    if isinstance(obj, dict):
        return json.dumps(obj, sort_keys=True, default=str)
    return None


#: The last few recordings, reused by plans that run the same model, task and per-chip shapes
#: on another chip or another FSDP or data-parallel degree (each use gets its own copy).
_RECORDINGS: OrderedDict = OrderedDict()


def forget() -> None:
    """Drop the reused recordings (the next estimate runs its model again)."""
    _RECORDINGS.clear()


def _recorded(plan, task: str, text_tokens: int | None):
    """(program, step, params, first optimizer record, shares, MoE layers) for ``task``."""
    found = _fingerprint(plan.obj)
    key = None if found is None else (
        found, task, plan.local_batch, plan.seq, plan.image_size, plan.frames, str(plan.dtype),
        text_tokens, plan.chips, tuple(e.info.placements for e in plan.layout.entries))
    if key is not None and key in _RECORDINGS:
        _RECORDINGS.move_to_end(key)
    else:
        model = _model(plan)
        experts = balance_experts(model)
        result = (*_run(plan, model, task, text_tokens), experts)
        if key is None:
            return result
        _RECORDINGS[key] = result
        if len(_RECORDINGS) > 4:
            _RECORDINGS.popitem(last=False)
    program, step, params, optimizer_at, shares, experts = _RECORDINGS[key]
    values = {v: dataclasses.replace(value) for v, value in program.values.items()}
    records = [dataclasses.replace(r) for r in program.records]
    return Program(records, values), step, params, optimizer_at, shares, experts


def estimate_plan(plan, task: str = "forward", *, mode: str = "compiled",
                  text_tokens: int | None = None) -> Estimate:
    """The :class:`Estimate` of one ``task`` of ``plan`` (see the module's docstring)."""
    _check(plan, task, mode)
    program, step, params, optimizer_at, shares, experts = _recorded(plan, task, text_tokens)
    chip = plan.generation.device
    if optimizer_at is not None and plan.fsdp > 1:
        for r in program.records[optimizer_at:]:
            r.scale = 1 / plan.fsdp
    if plan.chips > 1:
        program = split(program, plan.chips, chip)
    weight_bytes = sum(p.numel() * p.element_size() * shares.get(id(p), 1.0) for p in params)
    program = Program(program.records + _collectives(plan, task, weight_bytes), program.values)
    notes = ["fused graph: each matmul/attention op is a fusion, the ops between them fuse, "
             "intermediates inside a fusion stay on chip; collectives overlap the fusions",
             "attention FLOPs as PyTorch's counter counts them: causal attention counted whole"]
    if experts:
        notes.append(f"{experts} mixture-of-experts layers: tokens routed evenly to the experts")
    return cost(program, chip, mode, chips=plan.total_chips, title=_title(plan, task, step),
                items=step.items * plan.data * plan.fsdp, unit=step.unit, notes=tuple(notes),
                verdict=_verdict(plan, task, weight_bytes, params))
