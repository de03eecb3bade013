"""Which slice to rent: every generation x slice x parallelism x activation checkpointing that
fits a step in HBM, ranked by expected time and by list price, and the choices that are best in
both (the Pareto front).

For each generation (``generations``) and each slice of it up to ``max_chips`` chips (one host's
topologies and the pod slices, :mod:`tpu_lab.hardware.slices`), the step is split as MaxText
and TorchTPU users split it: tensor parallelism of 1, 2, 4 or 8 chips inside a host (what the
model's heads allow) and the rest of the slice as FSDP for training, data-parallel replicas
for inference. Each option's step is estimated (:meth:`~tpu_lab.sharding.plan.Plan.estimate`:
its expected time, its peak HBM per chip) and priced (:mod:`tpu_lab.hardware.prices`). Remat
"dots" and "full" are tried only where "none" does not fit: where it fits they only add
recomputation, slower and dearer on the same chips.

A step is recorded once per model, task and per-chip shape (the batch one tensor-parallel
group runs, its degree, the remat) and reused for every generation and FSDP degree. A decoder
language model of many identical layers is recorded with 3 and with 4 of them, and the rest is
added layer by layer (:func:`extrapolate`: every count, time and byte grows by the difference;
tests/test_choose.py checks it against the whole model), so that a 126-layer model costs a
4-layer one's recording.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass

import torch

from .._drawn import Drawn
from ..errors import ShardingError, TopologyError
from ..estimate.memory import Memory
from ..estimate.result import Estimate, OpCost, merged
from ..hardware.prices import price
from ..hardware.slices import multi_host
from ..hardware.topology import GENERATIONS, generation_named
from .info import dtype_name
from .plan import Plan, plan
from .remat import POLICIES
from .remat import check as remats_check
from .step_estimate import check_task, fingerprint

#: The tensor-parallel degrees tried inside a host.
TP_DEGREES = (1, 2, 4, 8)
#: Activation checkpointing from the least recomputation to the most.
LEAST_RECOMPUTE = ("none", "dots", "full")
#: Layers of the two small models a deep decoder's step is extrapolated from.
SAMPLED_LAYERS = (1, 2)


@dataclass(frozen=True)
class Option:
    """One way to run the step: on ``chips`` chips of ``generation`` (``devices`` as the runtime
    counts them: a TPU7x chip is two), tensor parallel ``tp`` x FSDP ``fsdp`` x data parallel
    ``data``, with ``remat``; its estimate (expected time, peak HBM per chip) and list price."""

    generation: str
    chips: int
    devices: int
    tp: int
    fsdp: int
    data: int
    remat: str
    estimate: Estimate
    commitment: str = "on-demand"

    @property
    def slice_name(self) -> str:
        """The slice as Cloud TPU names its size: generation-chips, e.g. ``v6e-128``."""
        return f"{self.generation}-{self.devices}"

    @property
    def parallelism(self) -> str:
        parts = [f"tp {self.tp}"] + [f"fsdp {self.fsdp}"] * (self.fsdp > 1) + [
            f"data {self.data}"] * (self.data > 1)
        return " x ".join(parts)

    @property
    def fits(self) -> bool:
        return bool(self.estimate.fits)

    @property
    def seconds(self) -> float:
        """The expected seconds of one step."""
        return self.estimate.expected_seconds

    @property
    def usd_per_step(self) -> float | None:
        return self.estimate.usd_per_step(self.commitment)


@dataclass(frozen=True)
class Choice(Drawn):
    """What :func:`choose` found: ``options`` that fit, fastest first; ``by_cost`` the same,
    cheapest first (those without a published price last); ``pareto`` those no other option
    beats on both time and price (fastest first); ``considered``: the ways to run the step
    that were weighed (generation x slice x split x remat), ``estimated``: the steps that took
    an estimate to decide (the others were decided by a peak already known, or by the
    weights, gradients and optimizer state alone not fitting)."""

    title: str
    task: str
    commitment: str
    options: tuple[Option, ...]
    by_cost: tuple[Option, ...]
    pareto: tuple[Option, ...]
    considered: int
    estimated: int
    generations: tuple[str, ...]
    max_chips: int
    tokens: float | None = None  # a whole run's tokens, to price the run

    @property
    def best(self) -> Option | None:
        """The fastest option that fits."""
        return self.options[0] if self.options else None

    def usd_per_run(self, option: Option) -> float | None:
        """The list price of a run of :attr:`tokens` tokens with ``option``."""
        if self.tokens is None:
            return None
        return option.estimate.usd_per(self.tokens, option.commitment)


def _slices(generation: str, max_chips: int) -> list[tuple[int, int]]:
    """(devices, hosts) of each slice of ``generation`` up to ``max_chips`` chips, in the
    fewest hosts that make it (one host's topology before a pod slice of several)."""
    gen = GENERATIONS[generation]
    fewest: dict[int, int] = {}
    for d, h in [*((d, 1) for d in gen.topologies), *multi_host(generation)]:
        if d <= max_chips * gen.devices_per_chip:
            fewest[d] = min(h, fewest.get(d, h))
    return sorted(fewest.items())


#: Config fields that make some decoder layers unlike the others (a dense layer among
#: mixture-of-experts ones, sliding-window attention among full): such a model is estimated whole.
_UNEVEN = ("first_k_dense_replace", "mlp_only_layers", "moe_layer_freq", "decoder_sparse_step",
           "sliding_window_pattern", "no_rope_layers")


def _layers(config) -> int | None:
    """The number of identical decoder layers of a transformers config (None: not one, or
    layers that differ)."""
    layers = getattr(config, "num_hidden_layers", None)
    if not (isinstance(layers, int) and layers > max(SAMPLED_LAYERS)
            and hasattr(config, "to_dict")):
        return None
    if len(set(getattr(config, "layer_types", None) or ())) > 1:
        return None
    if any(getattr(config, f, None) not in (None, 0, 1, [], ()) for f in _UNEVEN):
        return None
    return layers


def _with_layers(config, layers: int):
    smaller = copy.deepcopy(config)
    smaller.num_hidden_layers = layers
    if getattr(smaller, "layer_types", None):
        smaller.layer_types = smaller.layer_types[:layers]
    return smaller


def _scale(a: float, b: float, k: int) -> float:
    return max(a + k * (b - a), 0.0)


def _scaled_op(a: OpCost | None, b: OpCost | None, k: int) -> OpCost:
    base = a or dataclasses.replace(b, **{f: 0 for f in _OP_FIELDS}, count=0)
    more = b or dataclasses.replace(a, **{f: 0 for f in _OP_FIELDS}, count=0)
    return dataclasses.replace(
        base, count=round(_scale(base.count, more.count, k)),
        **{f: _scale(getattr(base, f), getattr(more, f), k) for f in _OP_FIELDS})


_OP_FIELDS = ("flops", "padded_flops", "hbm_bytes", "ici_bytes", "dcn_bytes", "compute_seconds",
              "memory_seconds", "collective_seconds", "busy_seconds", "launch_seconds")
_FIELDS = ("flops", "padded_flops", "hbm_bytes", "ici_bytes", "dcn_bytes", "compute_seconds",
           "memory_seconds", "collective_seconds", "launch_seconds")


def extrapolate(fewer: Estimate, more: Estimate, layers: int, sampled: int,
                title: str) -> Estimate:
    """The estimate of a model of ``layers`` identical layers from those of the same model with
    ``sampled`` and ``sampled + 1`` layers (``fewer``, ``more``): every op's count, FLOPs,
    bytes and seconds, the collectives, the peak HBM and what fills it grow by their difference
    per layer; the time is then combined as the costing combines it (its expected time by the
    same formula)."""
    from ..estimate.assumed import assumptions
    from ..estimate.graph import expected_seconds

    k = layers - sampled
    a_ops = {(o.name, o.shapes): o for o in fewer.ops}
    b_ops = {(o.name, o.shapes): o for o in more.ops}
    ops = merged([_scaled_op(a_ops.get(key), b_ops.get(key), k)
                  for key in dict.fromkeys([*a_ops, *b_ops])])
    totals = {f: _scale(getattr(fewer, f), getattr(more, f), k) for f in _FIELDS}
    work = [o for o in ops if o.kind not in ("collective", "launch")]
    busy = sum(o.busy_seconds for o in work)
    coll = totals["collective_seconds"]
    if more.mode == "eager":
        seconds = busy + totals["launch_seconds"]
    else:
        seconds = max(busy, coll) + totals["launch_seconds"]
    memory = None
    if fewer.memory is not None and more.memory is not None:
        kinds = dict.fromkeys([k_ for k_, _ in fewer.memory.breakdown + more.memory.breakdown])
        breakdown = tuple(sorted(
            ((kind, _scale(fewer.memory.of(kind), more.memory.of(kind), k)) for kind in kinds),
            key=lambda kv: -kv[1]))
        memory = Memory(more.memory.mode, _scale(fewer.memory.peak_bytes,
                                                 more.memory.peak_bytes, k),
                        more.memory.at, -1, tuple(kv for kv in breakdown if kv[1] > 0),
                        more.memory.notes)
    shares = {"compute": sum(o.busy_seconds for o in work if o.bound == "compute"),
              "memory": sum(o.busy_seconds for o in work if o.bound != "compute"),
              "collective": coll if more.mode == "eager" or coll > busy else 0.0,
              "launch": totals["launch_seconds"]}
    notes = (*more.notes, f"{layers} identical layers: costed from {sampled} and {sampled + 1}, "
             "each further layer adding their difference")
    estimate = dataclasses.replace(more, title=title, seconds=seconds, ops=ops, memory=memory,
                                   bound=max(shares, key=shares.get), notes=notes, **totals)
    return dataclasses.replace(estimate, expected_seconds=expected_seconds(estimate,
                                                                           assumptions()))


def _title(p: Plan, task: str, remat: str) -> str:
    what = (f"image {p.image_size[0]}x{p.image_size[1]}" if p.image_size else f"seq {p.seq}")
    return (f"{p.model} {task}: batch {p.batch} x {what} on {p.total_chips} x "
            f"{p.generation.device.product} (tp {p.chips}"
            + (f" x fsdp {p.fsdp}" if p.fsdp > 1 else "")
            + (f" x data {p.data}" if p.data > 1 else "")
            + (f", remat {remat}" if task == "train" and remat != "none" else "") + ")")


class _Estimator:
    """The plans of one model per tensor-parallel degree (a layout is computed once), and the
    estimate of an option, from the whole model or extrapolated from sampled layers."""

    def __init__(self, config, dtype, seq, image_size, frames, text_tokens) -> None:
        self.config, self.dtype = config, dtype
        self.step = dict(seq=seq, image_size=image_size, frames=frames)
        self.text_tokens = text_tokens
        self.layers = _layers(config)
        self.sampled = SAMPLED_LAYERS if self.layers else (None,)
        self.bases: dict[tuple[int, int | None], Plan] = {}

    def base(self, tp: int, layers: int | None) -> Plan:
        key = (tp, layers)
        if key not in self.bases:
            config = self.config if layers is None else _with_layers(self.config, layers)
            self.bases[key] = plan(config, chips=tp, dtype=self.dtype, **self.step)
        return self.bases[key]

    def splits(self, tp: int) -> bool:
        """Whether the model's heads split over ``tp`` chips."""
        try:
            self.base(tp, self.sampled[0])
        except ShardingError:
            return False
        return True

    def at_rest(self, tp: int, fsdp: int) -> float:
        """Bytes one chip holds at rest in training: its share of the weights, their gradients
        and AdamW's two moments (in the weights' dtype); an option whose chips cannot hold
        these is not estimated."""
        held = [max(self.base(tp, n).layout.bytes_per_chip) for n in self.sampled]
        if self.layers:
            held = [_scale(held[0], held[1], self.layers - self.sampled[0])]
        return 4 * held[0] / fsdp

    def estimate(self, task, generation, tp, fsdp, data, batch, remat, mode) -> Estimate:
        gen = GENERATIONS[generation]

        def fill(p: Plan) -> Plan:
            return dataclasses.replace(p, generation=gen, fsdp=fsdp, data=data, batch=batch,
                                       remat=remat, hosts=1, notes=())

        found = [fill(self.base(tp, n)).estimate(task, mode=mode, text_tokens=self.text_tokens)
                 for n in self.sampled]
        if not self.layers:
            return found[0]
        title = _title(fill(self.base(tp, self.sampled[0])), task, remat)
        return extrapolate(found[0], found[1], self.layers, self.sampled[0], title)


class _Search:
    """The least activation checkpointing with which a split of the step fits, estimating as
    few steps as it can: the peak HBM of a split is the same on every generation (only the
    capacity differs); more recomputation never holds more (none, dots, full); and a larger
    slice of the same tensor parallelism never holds more per chip (FSDP cuts more, each
    chip's batch is smaller), so what fitted the previous slice fits the next one."""

    def __init__(self, estimator: _Estimator, task: str, batch: int, mode: str,
                 tried: tuple[str, ...]) -> None:
        self.estimator, self.task, self.batch, self.mode, self.tried = (estimator, task, batch,
                                                                         mode, tried)
        self.peaks: dict[tuple[int, int, int, str], float] = {}
        self.estimated = 0

    def _fit(self, generation: str, tp: int, fsdp: int, data: int, r: str) -> Estimate | None:
        key = (tp, fsdp, data, r)
        if self.peaks.get(key, 0.0) > GENERATIONS[generation].hbm_per_device:
            return None
        e = self.estimator.estimate(self.task, generation, tp, fsdp, data, self.batch, r,
                                    self.mode)
        self.estimated += 1
        self.peaks[key] = e.memory.peak_bytes
        return e if e.fits else None

    def least(self, generation: str, tp: int, fsdp: int, data: int, before: str | None
              ) -> tuple[str, Estimate] | None:
        """(remat, estimate) of the least recomputation that fits, or None; ``before``: the
        least that fitted the previous, smaller slice of this generation and tensor
        parallelism (None: nothing did, or there was none)."""
        if before is not None:  # it fits here too: try only what recomputes less
            for r in self.tried[:self.tried.index(before) + 1]:
                e = self._fit(generation, tp, fsdp, data, r)
                if e is not None:
                    return r, e
        most = self.tried[-1]
        last = self._fit(generation, tp, fsdp, data, most)
        if last is None:  # the most recomputation does not fit: nothing does
            return None
        for r in self.tried[:-1]:
            e = self._fit(generation, tp, fsdp, data, r)
            if e is not None:
                return r, e
        return most, last


def _pareto(options: list[Option]) -> tuple[Option, ...]:
    priced = sorted((o for o in options if o.usd_per_step is not None),
                    key=lambda o: (o.seconds, o.usd_per_step))
    front, cheapest = [], float("inf")
    for o in priced:
        if o.usd_per_step < cheapest:
            front.append(o)
            cheapest = o.usd_per_step
    return tuple(front)


def choose(config, task: str = "train", *, batch: int, seq: int | None = None,
           image_size: tuple[int, int] | None = None, frames: int | None = None,
           generations: tuple[str, ...] = ("v5e", "v5p", "v6e", "v7"), max_chips: int = 256,
           remat: str | tuple[str, ...] | None = None, mode: str = "compiled",
           dtype: torch.dtype = torch.bfloat16, commitment: str = "on-demand",
           tokens: float | None = None, text_tokens: int | None = None) -> Choice:
    """Every way to run one ``task`` step of ``config`` (``batch`` global sequences of ``seq``
    tokens, or images of ``image_size``) on up to ``max_chips`` chips of each of
    ``generations`` that fits in HBM, ranked by expected time and by list price
    (``commitment``; ``tokens``: a whole training run's tokens, to price the run). ``remat``
    limits the activation checkpointing tried (default: "none", then "dots" and "full" where
    "none" does not fit). See the module's docstring."""
    check_task(task)
    for g in generations:
        generation_named(g)
    if isinstance(max_chips, bool) or not isinstance(max_chips, int) or max_chips < 1:
        raise ShardingError(f"max_chips must be a positive whole number, got {max_chips!r}.")
    price(generations[0], commitment)  # refuses an unknown commitment up front
    remats = ((remat,) if isinstance(remat, str) else tuple(remat)) if remat else POLICIES
    for r in remats:
        remats_check(r)
    estimator = _Estimator(config, dtype, seq, image_size, frames, text_tokens)
    first = estimator.base(1, estimator.sampled[0])  # refuses a config or step it cannot run
    tried = tuple(r for r in LEAST_RECOMPUTE if r in remats) if task == "train" else ("none",)
    search = _Search(estimator, task, batch, mode, tried)
    considered, options = 0, []
    for generation in generations:
        gen = GENERATIONS[generation]
        before: dict[int, str | None] = {}  # tp -> the least remat that fitted the last slice
        for devices, hosts in _slices(generation, max_chips):
            for tp in (t for t in TP_DEGREES if t <= devices // hosts and devices % t == 0):
                rest = devices // tp
                fsdp, data = (rest, 1) if task == "train" else (1, rest)
                if batch % rest or not estimator.splits(tp):
                    continue
                considered += len(tried)
                if task == "train" and estimator.at_rest(tp, fsdp) > gen.hbm_per_device:
                    continue
                found = search.least(generation, tp, fsdp, data, before.get(tp))
                before[tp] = None if found is None else found[0]
                if found is not None:
                    options.append(Option(generation, devices // gen.devices_per_chip, devices,
                                          tp, fsdp, data, found[0], found[1], commitment))
    by_time = tuple(sorted(options, key=lambda o: o.seconds))
    by_cost = tuple(sorted(options, key=lambda o: (o.usd_per_step is None,
                                                    o.usd_per_step or 0.0, o.seconds)))
    what = f"image {image_size[0]}x{image_size[1]}" if image_size else f"seq {seq}"
    title = f"{first.model} {task}: batch {batch} x {what}, {dtype_name(dtype)}, {mode}"
    return Choice(title, task, commitment, by_time, by_cost, _pareto(options), considered,
                  search.estimated, tuple(generations), max_chips, tokens)


#: The estimators of the last few models :func:`weigh` was asked about (their layouts kept).
_ESTIMATORS: dict[tuple, _Estimator] = {}


def slices(generation: str, max_chips: int = 256) -> tuple[int, ...]:
    """The slices of ``generation`` up to ``max_chips`` chips, as the devices they show
    (``'v6e'`` -> 1, 4, 8, 16, ...; a TPU7x chip shows two)."""
    generation_named(generation)
    return tuple(d for d, _ in _slices(generation, max_chips))


def weigh(config, task: str = "train", *, generation: str, devices: int, tp: int = 1,
          batch: int, seq: int | None = None, image_size: tuple[int, int] | None = None,
          frames: int | None = None, remat: str = "none", mode: str = "compiled",
          dtype: torch.dtype = torch.bfloat16, commitment: str = "on-demand",
          text_tokens: int | None = None) -> Option:
    """One way to run the step, as :func:`choose` weighs each: ``devices`` of ``generation``
    (one of :func:`slices`), tensor parallel ``tp`` and the rest FSDP (training) or data
    parallel replicas (inference), with ``remat``; its estimate (expected time, peak HBM per
    chip, whether it fits) and list price. Fast on a second call for the same model and step
    shape (the layouts and recordings are kept): what an interactive control calls as a
    slider moves."""
    check_task(task)
    remats_check(remat)
    found = slices(generation, 1 << 20)
    if devices not in found:
        raise TopologyError(f"TPU {generation} has no slice of {devices} devices; its slices: "
                            f"{', '.join(map(str, found))}.")
    hosts = dict(_slices(generation, 1 << 20))[devices]
    if tp not in TP_DEGREES or tp > devices // hosts or devices % tp:
        fitting = [t for t in TP_DEGREES if t <= devices // hosts and devices % t == 0]
        raise ShardingError(f"tensor parallelism of {tp} does not split {generation}-{devices} "
                            f"({devices // hosts} devices a host); try tp "
                            f"{', '.join(map(str, fitting))}.")
    rest = devices // tp
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1 or batch % rest:
        near = max(rest, batch // rest * rest) if isinstance(batch, int) else rest
        raise ShardingError(f"batch must be a positive multiple of the {rest} "
                            f"{'FSDP' if task == 'train' else 'data-parallel'} chips beside "
                            f"tensor parallelism of {tp}; got {batch!r}, try {near}.")
    price(generation, commitment)
    key = (id(config), fingerprint(config), str(dtype), seq, image_size, frames, text_tokens)
    estimator = _ESTIMATORS.get(key)
    if estimator is None:
        estimator = _Estimator(config, dtype, seq, image_size, frames, text_tokens)
        _ESTIMATORS.clear()  # one model at a time: a widget weighs one
        _ESTIMATORS[key] = estimator
    if not estimator.splits(tp):
        raise ShardingError(f"{estimator.base(1, estimator.sampled[0]).model}'s heads do not "
                            f"split over {tp} chips; try a tensor parallelism that divides them.")
    fsdp, data = (rest, 1) if task == "train" else (1, rest)
    gen = GENERATIONS[generation]
    e = estimator.estimate(task, generation, tp, fsdp, data, batch, remat, mode)
    return Option(generation, devices // gen.devices_per_chip, devices, tp, fsdp, data, remat, e,
                  commitment)
