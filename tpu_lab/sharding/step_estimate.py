"""A plan's step without weights: the model built on the meta device, run once under a
:class:`~tpu_lab.estimate.trace.Recorder` for the task, each op's share of work on one chip
set from the plan's tensor-parallel layout, the collectives of FSDP and data parallelism
added, and the whole costed as one program (:func:`tpu_lab.estimate.graph.cost`): its time on
an idealised chip and, from the same recording, the peak HBM of one chip
(:mod:`tpu_lab.estimate.memory`).

The step runs as a training loop runs it, in a function whose locals die when it returns:

- ``forward``: ``out = model(**inputs)`` under ``torch.no_grad()`` (``batch x seq`` tokens;
  one denoiser or VAE call at the plan's ``image_size`` for diffusion models);
- ``train``: ``out = model(**inputs)``, a loss (the model's own for a causal LM with labels,
  the mean square of the output otherwise), ``loss.backward()``, ``optimizer.step()`` and
  ``optimizer.zero_grad()``, with the optimizer's state there from the first step on (AdamW's
  two moments, SGD's momentum; ``torch.optim``'s ``foreach`` implementation, its default on an
  accelerator), and the plan's activation checkpointing (:mod:`.remat`);
- ``decode``: one new token for each of ``batch`` sequences, attending to a static cache of
  ``seq`` tokens (transformers' ``StaticCache``, as compiled decoding uses), the cache filled
  before the step.

What exists before the step is held as weights, optimizer state, KV cache or inputs; at the
end of a training step the gradients are known by the tensors ``.grad`` holds.

Parallelism, per step: the tensor-parallel all-reduces come from the ops
(:mod:`.tp_shares`); FSDP all-gathers the weights for the forward (and again for the backward)
and reduce-scatters the gradients, and holds weights, gradients and optimizer state cut
``fsdp`` ways, each block's weights gathered while its ops run; data parallelism all-reduces
the gradients, over the data-center network when the chips outnumber one pod
(``Chip.pod_chips``).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import gc
import json
from collections import OrderedDict
from dataclasses import dataclass

import torch

from ..errors import ShardingError
from ..estimate.graph import MODES, cost
from ..estimate.memory import Span, classify
from ..estimate.result import Estimate
from ..estimate.trace import Program, Record, Recorder
from . import remat as remats
from .meta_run import FusedAttention, balance_experts, use_fused_attention
from .step_inputs import Step, diffusion_step, family, language_step
from .tp_shares import split

TASKS = ("forward", "train", "decode")
OPTIMIZERS = ("adamw", "sgd")


def check(plan, task: str, mode: str, remat: str, optimizer: str) -> None:
    """Refuse what cannot be estimated, with the fix."""
    if task not in TASKS:
        raise ShardingError(f"task must be one of {', '.join(TASKS)}; got {task!r}.")
    if mode not in MODES:
        raise ShardingError(f"mode must be one of {', '.join(MODES)}; got {mode!r}.")
    remats.check(remat)
    if optimizer not in OPTIMIZERS:
        raise ShardingError(f"optimizer must be one of {', '.join(OPTIMIZERS)}; got "
                            f"{optimizer!r}.")
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


def step_model(obj, dtype: torch.dtype, device="meta") -> torch.nn.Module:
    """``obj`` (a plan's config, model or directory) as a model on ``device`` (the meta device:
    no weights; another: freshly initialised ones) in ``dtype``; a transformers model on the
    meta device attends as :mod:`.meta_run` says. A config is copied, and stays as it was."""
    from .meta import load_meta_model

    obj = obj if isinstance(obj, torch.nn.Module) else copy.deepcopy(obj)
    model, _ = load_meta_model(obj, device)
    cast(model, dtype)
    if device == "meta" and family(model) == "transformers":
        use_fused_attention(model)
    return model


def cast(model: torch.nn.Module, dtype: torch.dtype) -> None:
    """Every floating-point parameter and buffer of ``model`` in ``dtype``, as
    ``model.to(dtype)`` makes them (without the warnings some libraries print for it)."""
    for p in model.parameters():
        if p.is_floating_point():
            p.data = p.data.to(dtype)
    for module in model.modules():
        for name, b in module.named_buffers(recurse=False):
            if b.is_floating_point():
                setattr(module, name, b.to(dtype))


def _shares(plan, model) -> dict[int, float]:
    """id(parameter) -> the share of it one chip holds under the plan's layout."""
    entries = {}
    for e in plan.layout.entries:
        share = e.info.bytes_per_chip[0] / e.info.global_bytes if e.info.global_bytes else 1.0
        for name in (e.name, *e.aliases):
            entries[name] = share
    return {id(p): entries.get(n, 1.0)
            for n, p in model.named_parameters(remove_duplicate=False)}


def make_optimizer(name: str, params: list[torch.nn.Parameter]) -> torch.optim.Optimizer:
    """``torch.optim.AdamW`` or ``SGD`` with momentum 0.9, ``foreach`` as on an accelerator,
    with its state made as its first step makes it (so that it is there from the start)."""
    if name == "adamw":
        optimizer = torch.optim.AdamW(params, lr=1e-4, foreach=True)
        for p in params:
            optimizer.state[p] = {"step": torch.tensor(0.0), "exp_avg": torch.zeros_like(p),
                                  "exp_avg_sq": torch.zeros_like(p)}
    else:
        optimizer = torch.optim.SGD(params, lr=1e-3, momentum=0.9, foreach=True)
        for p in params:
            optimizer.state[p] = {"momentum_buffer": torch.zeros_like(p)}
    return optimizer


def run_step(model: torch.nn.Module, step: Step, task: str, optimizer=None, marks=None):
    """One ``task`` of ``model`` (see the module's docstring), its locals freed when it returns;
    ``marks(name)`` is called as the backward and the optimizer begin. The bundled device runs
    this same function in the checks of the estimate."""
    if task == "train":
        model.train()
        out = step.call(model)
        loss = step.loss(out)
        if marks is not None:
            marks("backward")
        loss.backward()
        if marks is not None:
            marks("optimizer")
        optimizer.step()
        optimizer.zero_grad()
        return
    model.eval()
    with torch.no_grad():
        out = step.call(model)  # noqa: F841 - the step's result, alive until it returns


@dataclass
class StepRecording:
    """One recorded step and what the costing needs of it."""

    program: Program
    step: Step
    params: list
    shares: dict[int, float]
    experts: int
    marks: dict[str, int]
    units: list[tuple[int, ...]]  # the parameter values of each FSDP unit (a block, the rest)
    gathered: frozenset[int]  # the weights whose matmuls' outputs tensor parallelism gathers


def _cache_tensors(step: Step) -> list[torch.Tensor]:
    cache = step.kwargs.get("cache", step.kwargs.get("past_key_values"))
    found = []
    for layer in getattr(cache, "layers", ()):
        found += [t for t in (getattr(layer, "keys", None), getattr(layer, "values", None))
                  if isinstance(t, torch.Tensor)]
    return found


def _kv_share(model, shares: dict[int, float]) -> float:
    """The share of the KV cache one chip holds: the key projection's (heads split or not)."""
    for name, p in model.named_parameters():
        if name.endswith(("k_proj.weight", "to_k.weight", "key.weight")):
            return shares.get(id(p), 1.0)
    return 1.0


@dataclass
class _Prepared:
    model: torch.nn.Module
    step: Step
    params: list
    shares: dict[int, float]
    optimizer: torch.optim.Optimizer | None
    experts: int


def _prepare(plan, task: str, text_tokens: int | None, remat: str, optimizer: str,
             device="meta") -> _Prepared:
    """The model on ``device``, its step's inputs (the KV cache filled for a decode), its
    blocks checkpointed and its optimizer made for a training step."""
    model = step_model(plan.obj, plan.dtype, device)
    experts = balance_experts(model) if device == "meta" else 0
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
    if device != "meta":
        step = step.on(device)
    params = list({id(p): p for p in model.parameters()}.values())
    if task == "decode":  # fill the static cache before the step
        model.eval()
        with torch.no_grad(), FusedAttention() if device == "meta" else contextlib.nullcontext():
            step.call(model)
    if task == "train":
        remats.checkpoint_blocks(model, remat,
                                 FusedAttention if device == "meta" else contextlib.nullcontext)
    opt = make_optimizer(optimizer, params) if task == "train" else None
    return _Prepared(model, step, params, _shares(plan, model), opt, experts)


@contextlib.contextmanager
def _collector_paused():
    """Python's cyclic garbage collector paused: a recording makes many objects, which it would
    scan again and again (about a sixth of a large model's recording); the step's tensors are
    freed by reference counting, as on the device, and the collector runs again after."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _record(plan, task: str, text_tokens: int | None, remat: str, optimizer: str
            ) -> StepRecording:
    with _collector_paused():
        return _recording(plan, task, text_tokens, remat, optimizer)


def _recording(plan, task: str, text_tokens: int | None, remat: str, optimizer: str
               ) -> StepRecording:
    ready = _prepare(plan, task, text_tokens, remat, optimizer)
    model, step, params, shares, opt = (ready.model, ready.step, ready.params, ready.shares,
                                        ready.optimizer)
    rec = Recorder()
    at_rest = 1 / plan.fsdp
    for p in params:
        rec.hold(p, "weights", shares.get(id(p), 1.0))
    for b in model.buffers():
        rec.hold(b, "weights")
    if opt is not None:
        for p in params:
            for t in opt.state[p].values():
                if t.dim():
                    rec.hold(t, "optimizer state", shares.get(id(p), 1.0))
    kv = _kv_share(model, shares)
    for t in _cache_tensors(step):
        rec.hold(t, "KV cache", kv)
    for t in step.kwargs.values():
        if isinstance(t, torch.Tensor):
            rec.hold(t, "inputs")
    marks: dict[str, int] = {}

    def mark(name: str) -> None:
        marks[name] = len(rec.program.records)
        if name == "optimizer":  # what .grad holds now is the gradients
            for p in params:
                if p.grad is not None:
                    rec.hold(p.grad, "gradients", shares.get(id(p), 1.0))

    with FusedAttention(), rec:
        run_step(model, step, task, opt, mark)
    program = rec.program
    for b in program.buffers:  # FSDP cuts weights, gradients and optimizer state at rest
        if b.kind in ("weights", "gradients", "optimizer state"):
            b.scale = at_rest
    classify(program, marks.get("backward"))
    return StepRecording(program, step, params, shares, ready.experts, marks,
                         _units(model, rec), _gathered(plan, model, rec))


def measure_peak(plan, task: str = "forward", *, remat: str | None = None,
                 optimizer: str | None = None, text_tokens: int | None = None,
                 device: str = "tpu") -> int:
    """The peak bytes the step of ``plan`` holds on ``device`` (this process's chip), run for
    real with freshly initialised weights: the measurement an estimate's eager peak is
    checked against (``torch.accelerator.max_memory_allocated()`` over the step, less what
    the chip held before the step's model was made). One chip's plan only: a
    tensor-parallel step runs on one process per chip."""
    if plan.chips * plan.fsdp > 1:
        raise ShardingError(f"measure_peak runs the step in this process, on one chip; this plan "
                            f"shards it over {plan.chips * plan.fsdp}: run it on one process per "
                            "chip (%tpu cluster start) and read each rank's peak.")
    remat = plan.remat if remat is None else remat
    optimizer = plan.optimizer if optimizer is None else optimizer
    check(plan, task, "eager", remat, optimizer)
    gc.collect()  # what earlier work left to the collector is not the step's
    before = torch.accelerator.memory_allocated()
    ready = _prepare(plan, task, text_tokens, remat, optimizer, device)
    torch.accelerator.synchronize()
    torch.accelerator.reset_peak_memory_stats()
    run_step(ready.model, ready.step, task, ready.optimizer)
    torch.accelerator.synchronize()
    return torch.accelerator.max_memory_allocated() - before


#: Tensor-parallel styles that gather a split matmul's output whole on every chip.
GATHERING = {"colwise_rep", "colwise_gather_output"}


def _gathered(plan, model: torch.nn.Module, rec: Recorder) -> frozenset[int]:
    styles = {n: e.style for e in plan.layout.entries for n in (e.name, *e.aliases)}
    return frozenset(rec.value_of(p) for n, p in model.named_parameters(remove_duplicate=False)
                     if styles.get(n) in GATHERING)


def _units(model: torch.nn.Module, rec: Recorder) -> list[tuple[int, ...]]:
    """The parameter values of each FSDP unit: every block (:func:`.remat.blocks`), then the
    parameters of no block."""
    seen: set[int] = set()
    units = []
    for block in [*remats.blocks(model), model]:
        ps = [p for p in block.parameters() if id(p) not in seen]
        seen.update(id(p) for p in ps)
        if ps:
            units.append(tuple(rec.value_of(p) for p in ps))
    return units


def _fsdp_spans(plan, recording: StepRecording) -> tuple[Span, ...]:
    """Each FSDP unit's weights gathered (``1 - 1/fsdp`` more of them on each chip) from the
    first to the last op that reads them, in the forward and again in the backward."""
    if plan.fsdp == 1:
        return ()
    program, marks = recording.program, recording.marks
    backward = marks.get("backward", len(program.records))
    end = marks.get("optimizer", len(program.records))
    unit_of = {v: u for u, values in enumerate(recording.units) for v in values}
    reads: dict[tuple[int, bool], list[int]] = {}
    for i, r in enumerate(program.records[:end]):
        for v in r.ins:
            u = unit_of.get(v)
            if u is not None:
                reads.setdefault((u, i >= backward), []).append(i)
    spans = []
    for (u, _), at in reads.items():
        nbytes = sum(program.values[v].nbytes * program.values[v].share
                     for v in recording.units[u]) * (1 - 1 / plan.fsdp)
        spans.append(Span(min(at), max(at), nbytes))
    return tuple(spans)


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


def _recorded(plan, task: str, text_tokens: int | None, remat: str, optimizer: str
              ) -> StepRecording:
    found = _fingerprint(plan.obj)
    key = None if found is None else (
        found, task, plan.local_batch, plan.seq, plan.image_size, plan.frames, str(plan.dtype),
        text_tokens, plan.chips, plan.fsdp, remat, optimizer,
        tuple(e.info.placements for e in plan.layout.entries))
    if key is None:
        return _record(plan, task, text_tokens, remat, optimizer)
    if key in _RECORDINGS:
        _RECORDINGS.move_to_end(key)
    else:
        _RECORDINGS[key] = _record(plan, task, text_tokens, remat, optimizer)
        if len(_RECORDINGS) > 4:
            _RECORDINGS.popitem(last=False)
    kept = _RECORDINGS[key]
    program = kept.program
    values = {v: dataclasses.replace(value) for v, value in program.values.items()}
    records = [dataclasses.replace(r) for r in program.records]
    return dataclasses.replace(kept, program=Program(records, values, program.buffers))


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


def _title(plan, task: str, remat: str) -> str:
    what = (f"image {plan.image_size[0]}x{plan.image_size[1]}" if plan.image_size else
            f"seq {plan.seq}")
    if plan.frames:
        what += f" x {plan.frames} frames"
    mesh = f"tp {plan.chips}" + (f" x fsdp {plan.fsdp}" if plan.fsdp > 1 else "") + (
        f" x data {plan.data}" if plan.data > 1 else "")
    checkpointed = f", remat {remat}" if task == "train" and remat != "none" else ""
    return (f"{plan.model} {task}: batch {plan.batch} x {what} on {plan.total_chips} x "
            f"{plan.generation.device.product} ({mesh}{checkpointed})")


def _memory_notes(plan, task: str, mode: str, optimizer: str) -> tuple[str, ...]:
    notes = ["HBM: every tensor the step allocates, from the op that makes it to " + (
        "the op before which the step lets go of it (eager)" if mode == "eager" else
        "its last use; a fusion's intermediates stay on chip (one compiled program; XLA's "
        "scheduling and buffer assignment may differ)")]
    if task == "train":
        notes.append(f"optimizer: torch.optim.{'AdamW' if optimizer == 'adamw' else 'SGD'} "
                     "(foreach), its state in the weights' dtype, there from the first step")
    if plan.fsdp > 1:
        notes.append(f"FSDP {plan.fsdp}: weights, gradients and optimizer state cut {plan.fsdp} "
                     "ways, each block's weights gathered while its ops run")
    return tuple(notes)


def estimate_plan(plan, task: str = "forward", *, mode: str = "compiled",
                  text_tokens: int | None = None, remat: str | None = None,
                  optimizer: str | None = None) -> Estimate:
    """The :class:`Estimate` of one ``task`` of ``plan`` (see the module's docstring): its time
    on an idealised chip and one chip's peak HBM; ``remat`` and ``optimizer`` default to the
    plan's."""
    remat = plan.remat if remat is None else remat
    optimizer = plan.optimizer if optimizer is None else optimizer
    check(plan, task, mode, remat, optimizer)
    recording = _recorded(plan, task, text_tokens, remat, optimizer)
    program, params, shares = recording.program, recording.params, recording.shares
    chip = plan.generation.device
    optimizer_at = recording.marks.get("optimizer")
    if optimizer_at is not None and plan.fsdp > 1:
        for r in program.records[optimizer_at:]:
            r.scale = 1 / plan.fsdp
    spans = _fsdp_spans(plan, recording)
    if plan.chips > 1:
        program = split(program, plan.chips, chip, recording.gathered)
    weight_bytes = sum(p.numel() * p.element_size() * shares.get(id(p), 1.0) for p in params)
    program = Program(program.records + _collectives(plan, task, weight_bytes), program.values,
                      program.buffers)
    notes = ["fused graph: each matmul/attention op is a fusion, the ops between them fuse, "
             "intermediates inside a fusion stay on chip; collectives overlap the fusions"
             if mode != "eager" else "op by op: each op its own program, with a launch",
             "attention FLOPs as PyTorch's counter counts them: causal attention counted whole"]
    if recording.experts:
        notes.append(f"{recording.experts} mixture-of-experts layers: tokens routed evenly to "
                     "the experts")
    step = recording.step
    estimate = cost(program, chip, mode, chips=plan.total_chips,
                    title=_title(plan, task, remat), items=step.items * plan.data * plan.fsdp,
                    unit=step.unit, notes=tuple(notes), spans=spans,
                    memory_notes=_memory_notes(plan, task, mode, optimizer))
    return dataclasses.replace(estimate, task=task)
