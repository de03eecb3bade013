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
from ..estimate.affine import between
from ..estimate.graph import MODES, cost
from ..estimate.memory import Span, classify
from ..estimate.result import Estimate
from ..estimate.trace import Buffer, Program, Record, Recorder, Value
from . import remat as remats
from .meta_run import FusedAttention, balance_experts, use_fused_attention
from .step_inputs import Step, diffusion_step, family, language_step
from .tp_shares import split

TASKS = ("forward", "train", "decode")
OPTIMIZERS = ("adamw", "sgd")


def check_task(task: str) -> None:
    if task not in TASKS:
        raise ShardingError(f"task must be one of {', '.join(TASKS)}; got {task!r}.")


def check(plan, task: str, mode: str, remat: str, optimizer: str) -> None:
    """Refuse what cannot be estimated, with the fix."""
    check_task(task)
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


def _shares(plan) -> dict[str, float]:
    """Parameter name -> the share of it one chip holds under the plan's layout."""
    entries = {}
    for e in plan.layout.entries:
        share = e.info.bytes_per_chip[0] / e.info.global_bytes if e.info.global_bytes else 1.0
        for name in (e.name, *e.aliases):
            entries[name] = share
    return entries


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


@dataclass(frozen=True)
class Weight:
    """A parameter of the recorded model: its names (a tied weight has several), its value in
    the program and its bytes."""

    names: tuple[str, ...]
    value: int
    nbytes: int


@dataclass
class StepRecording:
    """One recorded step, the same whatever the plan's layout (which :func:`_laid_out` applies),
    and what the costing needs of it."""

    program: Program
    items: float
    unit: str
    weights: tuple[Weight, ...]
    held: tuple[tuple[str, int], ...]  # (parameter name, value): what takes that weight's share
    experts: int
    marks: dict[str, int]
    units: list[tuple[int, ...]]  # the parameter values of each FSDP unit (a block, the rest)


def _cache_tensors(step: Step) -> list[torch.Tensor]:
    cache = step.kwargs.get("cache", step.kwargs.get("past_key_values"))
    found = []
    for layer in getattr(cache, "layers", ()):
        found += [t for t in (getattr(layer, "keys", None), getattr(layer, "values", None))
                  if isinstance(t, torch.Tensor)]
    return found


def _kv_name(model, names: dict[int, tuple[str, ...]]) -> str | None:
    """The parameter whose share of the KV cache one chip holds: the key projection's (heads
    split or not)."""
    for name, p in model.named_parameters():
        if name.endswith(("k_proj.weight", "to_k.weight", "key.weight")):
            return names[id(p)][-1]
    return None


@dataclass
class _Prepared:
    model: torch.nn.Module
    step: Step
    params: list
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
    return _Prepared(model, step, params, opt, experts)


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
    model, step, params, opt = ready.model, ready.step, ready.params, ready.optimizer
    names: dict[int, tuple[str, ...]] = {}
    for n, p in model.named_parameters(remove_duplicate=False):
        names[id(p)] = (*names.get(id(p), ()), n)
    rec = Recorder()
    weights = tuple(Weight(names[id(p)], rec.hold(p, "weights"), p.numel() * p.element_size())
                    for p in params)
    held = [(w.names[-1], w.value) for w in weights]
    for b in model.buffers():
        rec.hold(b, "weights")
    if opt is not None:
        held += [(names[id(p)][-1], rec.hold(t, "optimizer state"))
                 for p in params for t in opt.state[p].values() if t.dim()]
    kv = _kv_name(model, names)
    for t in _cache_tensors(step):
        v = rec.hold(t, "KV cache")
        if kv is not None:
            held.append((kv, v))
    for t in step.kwargs.values():
        if isinstance(t, torch.Tensor):
            rec.hold(t, "inputs")
    marks: dict[str, int] = {}

    def mark(name: str) -> None:
        marks[name] = len(rec.program.records)
        if name == "optimizer":  # what .grad holds now is the gradients
            held.extend((names[id(p)][-1], rec.hold(p.grad, "gradients"))
                        for p in params if p.grad is not None)

    with FusedAttention(), rec:
        run_step(model, step, task, opt, mark)
    program = rec.program
    classify(program, marks.get("backward"))
    return StepRecording(program, step.items, step.unit, weights, tuple(held), ready.experts,
                         marks, _units(model, rec))


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


def _fsdp_spans(plan, program: Program, recording: StepRecording) -> tuple[Span, ...]:
    """Each FSDP unit's weights gathered (``1 - 1/fsdp`` more of them on each chip) from the
    first to the last op that reads them, in the forward and again in the backward."""
    if plan.fsdp == 1:
        return ()
    marks = recording.marks
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


def fingerprint(obj) -> str | None:
    """A text that equal configs share (None: do not reuse a recording of ``obj``)."""
    if hasattr(obj, "to_json_string"):
        return f"{type(obj).__name__}:{obj.to_json_string()}"
    if isinstance(obj, dict):
        return json.dumps(obj, sort_keys=True, default=str)
    return None


@dataclass
class _Family:
    """The recordings of one model, task, shape of a sequence or image, remat and optimizer at
    up to three batches above one, and whether the third was as the first two predicted
    (:func:`tpu_lab.estimate.affine.between`): then every other batch is made from them."""

    samples: dict[int, StepRecording] = dataclasses.field(default_factory=dict)
    affine: bool | None = None


#: Recordings by (family, batch), the last few reused (each use gets its own copy: a plan's
#: layout, FSDP and data parallelism are applied to the copy), and the families' samples.
_RECORDINGS: OrderedDict = OrderedDict()
_FAMILIES: OrderedDict = OrderedDict()
_KEPT = 64


def forget() -> None:
    """Drop the reused recordings (the next estimate runs its model again)."""
    _RECORDINGS.clear()
    _FAMILIES.clear()


def _between(a: tuple[int, StepRecording], b: tuple[int, StepRecording], batch: int
             ) -> StepRecording | None:
    (at_a, ra), (at_b, rb) = a, b
    program = between(ra.program, rb.program, at_a, at_b, batch)
    if program is None:
        return None
    items = ra.items + (rb.items - ra.items) * (batch - at_a) / (at_b - at_a)
    return dataclasses.replace(ra, program=program, items=items)


def _same(a: StepRecording, b: StepRecording) -> bool:
    return a.program == b.program and a.items == b.items and a.held == b.held


def _at_batch(family: _Family, batch: int, record) -> StepRecording:
    """The recording at ``batch``: made from two samples where the family is affine, else
    recorded (and kept as a sample while there are fewer than three). A batch of one is
    always recorded: models take other paths for a single sequence or image."""
    samples = list(family.samples.items())
    if family.affine and batch > 1:
        made = _between(samples[0], samples[1], batch)
        if made is not None:
            return made
    recording = record()
    if len(samples) < 3 and batch > 1:
        family.samples[batch] = recording
        if len(samples) == 2:
            made = _between(samples[0], samples[1], batch)
            family.affine = made is not None and _same(made, recording)
    return recording


def _recorded(plan, task: str, text_tokens: int | None, remat: str, optimizer: str
              ) -> StepRecording:
    """The step's recording (its layout not yet applied), reused where it can be."""
    found = fingerprint(plan.obj)

    def record() -> StepRecording:
        return _record(plan, task, text_tokens, remat, optimizer)

    if found is None:
        return record()
    key = (found, task, plan.seq, plan.image_size, plan.frames, str(plan.dtype), text_tokens,
           remat, optimizer)
    batch = plan.local_batch
    kept = _RECORDINGS.get((key, batch))
    if kept is None:
        family = _FAMILIES.pop(key, None) or _Family()
        _FAMILIES[key] = family
        while len(_FAMILIES) > _KEPT // 4:
            _FAMILIES.popitem(last=False)
        kept = _RECORDINGS[key, batch] = _at_batch(family, batch, record)
        while len(_RECORDINGS) > _KEPT:
            _RECORDINGS.popitem(last=False)
    _RECORDINGS.move_to_end((key, batch))
    return kept


#: Tensor-parallel styles that gather a split matmul's output whole on every chip.
GATHERING = {"colwise_rep", "colwise_gather_output"}


def _laid_out(plan, recording: StepRecording) -> tuple[Program, frozenset[int], float]:
    """A copy of the recording's program with the plan's layout applied (each weight's, its
    gradient's, its optimizer state's and the KV cache's share of one chip), the values whose
    matmul outputs tensor parallelism gathers, and the weights' bytes on one chip."""
    program = recording.program
    values = {v: Value(x.spec, x.base, x.share, x.partial, x.buffer)
              for v, x in program.values.items()}
    records = [Record(r.sig, r.ins, r.outs, r.share, r.collective, r.scale)
               for r in program.records]
    buffers = [Buffer(b.nbytes, b.made, b.value, b.freed, b.kind, b.scale)
               for b in program.buffers]
    shares = _shares(plan)
    for name, v in recording.held:
        values[v].share = shares.get(name, 1.0)
    styles = {n: e.style for e in plan.layout.entries for n in (e.name, *e.aliases)}
    gathered = frozenset(w.value for w in recording.weights
                         if any(styles.get(n) in GATHERING for n in w.names))
    weight_bytes = sum(w.nbytes * shares.get(w.names[-1], 1.0) for w in recording.weights)
    return Program(records, values, buffers), gathered, weight_bytes


#: What FSDP cuts ``fsdp`` ways on each chip, at rest.
SHARDED_AT_REST = ("weights", "gradients", "optimizer state")


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
    program, gathered, weight_bytes = _laid_out(plan, recording)
    chip = plan.generation.device
    optimizer_at = recording.marks.get("optimizer")
    if optimizer_at is not None and plan.fsdp > 1:
        for r in program.records[optimizer_at:]:
            r.scale = 1 / plan.fsdp
    for b in program.buffers:  # FSDP cuts weights, gradients and optimizer state at rest
        if b.kind in SHARDED_AT_REST:
            b.scale = 1 / plan.fsdp
    spans = _fsdp_spans(plan, program, recording)
    if plan.chips > 1:
        program = split(program, plan.chips, chip, gathered, recording.marks.get("backward"))
    program = Program(program.records + _collectives(plan, task, weight_bytes), program.values,
                      program.buffers)
    notes = ["fused graph: each matmul/attention op is a fusion, the ops between them fuse, "
             "intermediates inside a fusion stay on chip; collectives overlap the fusions"
             if mode != "eager" else "op by op: each op its own program, with a launch",
             "attention FLOPs as PyTorch's counter counts them: causal attention counted whole"]
    if recording.experts:
        notes.append(f"{recording.experts} mixture-of-experts layers: tokens routed evenly to "
                     "the experts")
    estimate = cost(program, chip, mode, chips=plan.total_chips,
                    title=_title(plan, task, remat), items=recording.items * plan.data * plan.fsdp,
                    unit=recording.unit, notes=tuple(notes), spans=spans,
                    memory_notes=_memory_notes(plan, task, mode, optimizer))
    return dataclasses.replace(estimate, task=task)
