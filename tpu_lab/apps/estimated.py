"""The estimated TPU time of a demo's request, shown beside its host time: each part of the
pipeline (the denoiser's steps, the text encoders, the VAE's decode) estimated from its config on
the meta device (:meth:`tpu_lab.sharding.plan.Plan.estimate` of one call, in the request's
mode: eager pays a launch per op, fuse and compiled one per call), times the calls the request
makes of it, on the chips the request runs on. An estimate of an idealised chip, never a
measurement (``docs/estimates.md``).

A demo says what its pipeline runs for a request as :class:`Call` s (it knows where its pipeline
doubles the batch or the calls for classifier-free guidance); :func:`estimate_request` costs them.
Each call's estimate is kept per (model config, chips, shapes, mode), so a request that repeats a
model, chip count and size (any number of steps) costs dictionary look-ups.

The engine takes image sizes as 8x VAEs make them (latents 8x smaller); a demo whose VAE scales
by another factor passes :func:`engine_size` of its request's size, the size whose latents are
its latents.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from .shared import TP_TOPOLOGY

#: The estimates kept (each call's seconds and bound), most recently used last.
_KEPT: OrderedDict = OrderedDict()
_KEEP = 64


@dataclass(frozen=True)
class Call:
    """``calls`` calls of the pipeline's ``component`` in one request, each one forward of its
    model as :meth:`~tpu_lab.sharding.plan.Plan.estimate` takes it: ``batch``, with ``seq`` tokens
    (a text encoder) or ``image_size`` (``frames``, ``text_tokens``: a denoiser or a VAE's
    decode). ``split``: the call runs tensor parallel over the request's chips (with ``tp_plan``
    added to the model's own plan); otherwise every chip runs it whole."""

    part: str
    component: str
    calls: int
    batch: int
    seq: int | None = None
    image_size: tuple[int, int] | None = None
    frames: int | None = None
    text_tokens: int | None = None
    split: bool = False
    tp_plan: dict | None = None


@dataclass(frozen=True)
class Part:
    """One part of the request: its model's class (the pipeline's ``component``), how many
    calls, each call's estimated time (the idealised bound) and what bounds it, one call's
    estimated peak HBM per chip and the weights among it, and each call's expected time."""

    name: str
    model: str
    calls: int
    seconds_per_call: float
    bound: str
    component: str = ""
    peak_bytes: float = 0.0
    weight_bytes: float = 0.0
    expected_per_call: float = 0.0  # each call's expected time (Estimate.expected_seconds)

    @property
    def seconds(self) -> float:
        return self.calls * self.seconds_per_call

    @property
    def expected(self) -> float:
        return self.calls * self.expected_per_call


@dataclass(frozen=True)
class RequestEstimate:
    """A request's estimated TPU time: its parts, on ``chips`` chips of TPU ``generation`` in
    ``mode`` (a demo mode's value), making ``items`` ``unit`` s (images or clips)."""

    generation: str
    chips: int
    mode: str
    items: int
    unit: str
    parts: tuple[Part, ...]

    @property
    def seconds(self) -> float:
        return sum(p.seconds for p in self.parts)

    @property
    def per_item(self) -> float:
        return self.seconds / self.items

    @property
    def expected(self) -> float:
        """The request's expected TPU time (the idealised :attr:`seconds` at the efficiencies
        real runs reach: :mod:`tpu_lab.estimate.assumed`)."""
        return sum(p.expected for p in self.parts)

    @property
    def expected_per_item(self) -> float:
        return self.expected / self.items

    @property
    def peak_hbm_bytes(self) -> float:
        """One chip's estimated peak over the request: the weights of every model it runs
        (a pipeline keeps them all on the chip), and the most any one call adds to its own."""
        weights = {p.component: p.weight_bytes for p in self.parts}
        return sum(weights.values()) + max(p.peak_bytes - p.weight_bytes for p in self.parts)

    @property
    def label(self) -> str:
        return f"estimated on an idealised TPU {self.generation} (not a measurement)"

    def to_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "chips": self.chips,
            "mode": self.mode,
            f"seconds_per_{self.unit}": self.per_item,
            "seconds": self.seconds,
            f"expected_seconds_per_{self.unit}": self.expected_per_item,
            "expected_seconds": self.expected,
            "peak_hbm_bytes_per_chip": self.peak_hbm_bytes,
            "parts": [{"part": p.name, "model": p.model, "calls": p.calls,
                       "seconds": p.seconds, "expected_seconds": p.expected, "bound": p.bound}
                      for p in self.parts],
        }  # fmt: skip

    def text(self) -> str:
        """One line: the expected time per item beside its idealised bound, the label, the
        chips, then each part's expected time, and the peak HBM per chip."""
        from ..units import format_bytes
        from ..views.estimate import seconds_text

        chips = f"{self.chips} chip" + ("s, tensor parallel" if self.chips > 1 else "")
        parts = " + ".join(
            f"{p.name} {seconds_text(p.expected)} ({p.calls} x {p.model}, {p.bound}-bound)"
            for p in self.parts
        )
        return (f"TPU time: expected about {seconds_text(self.expected_per_item)} per "
                f"{self.unit} (idealised bound {seconds_text(self.per_item)}), {self.label}, on "
                f"{chips}, {self.mode}: {parts}; peak HBM "
                f"{format_bytes(int(self.peak_hbm_bytes))} per chip")  # fmt: skip


def engine_size(size: int, vae_scale_factor: int) -> tuple[int, int]:
    """The image size whose latents (8x smaller) are those of a ``size`` image under a VAE that
    scales by ``vae_scale_factor``."""
    side = size // vae_scale_factor * 8
    return side, side


def generation_of(chips: int) -> str:
    """The TPU generation a request on ``chips`` chips runs on: this process's topology for one
    chip, :data:`~.shared.TP_TOPOLOGY` for more."""
    from ..session import current_topology

    if chips == 1:
        return current_topology()[0]
    return TP_TOPOLOGY.rsplit("-", 1)[0]


def _config(module) -> Any:
    """What :func:`tpu_lab.sharding.plan.plan` builds ``module``'s model from: a transformers
    config, or a diffusers config with its class name."""
    config = module.config
    if hasattr(config, "to_json_string"):
        return config
    return {**config, "_class_name": type(module).__name__}


def _text(config) -> str:
    if hasattr(config, "to_json_string"):
        return f"{type(config).__name__}:{config.to_json_string()}"
    return json.dumps(config, sort_keys=True, default=str)


def _one(config, call: Call, chips: int, generation: str, mode: str
         ) -> tuple[float, float, str, float, float]:
    """(seconds, expected seconds, bound, peak HBM per chip, weights per chip) of one ``call``
    on ``chips`` chips in ``mode`` (kept; see the module's text)."""
    from ..sharding import plan

    key = (_text(config), generation, chips, mode, call.batch, call.seq, call.image_size,
           call.frames, call.text_tokens, json.dumps(call.tp_plan, sort_keys=True))
    if key not in _KEPT:
        p = plan(config, chips=chips, generation=generation, batch=call.batch, seq=call.seq,
                 tp_plan=call.tp_plan, image_size=call.image_size, frames=call.frames)
        e = p.estimate("forward", mode=mode, text_tokens=call.text_tokens)
        _KEPT[key] = (e.seconds, e.expected_seconds, e.bound, e.peak_hbm_bytes,
                      e.memory.of("weights"))
        if len(_KEPT) > _KEEP:
            _KEPT.popitem(last=False)
    _KEPT.move_to_end(key)
    return _KEPT[key]


@dataclass(frozen=True)
class Unestimated:
    """What the panel says of a pipeline the estimates do not cover (a model given with
    ``--model`` whose class they do not know): why."""

    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"label": "no estimate", "reason": self.reason}

    def text(self) -> str:
        return f"TPU time: no estimate for this pipeline: {self.reason}"


def estimate_request(pipe, calls: list[Call], *, chips: int, mode: str, items: int,
                     unit: str) -> RequestEstimate | Unestimated:
    """The estimated TPU time of ``calls`` of ``pipe``'s components on ``chips`` chips in
    ``mode`` (a :class:`Call` with ``split`` runs tensor parallel over them, the others whole on
    each); :class:`Unestimated` when the estimates do not cover one of its models."""
    from ..errors import ShardingError

    generation = generation_of(chips)
    parts = []
    for call in calls:
        module = getattr(pipe, call.component)
        try:
            seconds, expected, bound, peak, weights = _one(
                _config(module), call, chips if call.split else 1, generation, mode)
        except ShardingError as exc:
            return Unestimated(str(exc))
        parts.append(Part(call.part, type(module).__name__, call.calls, seconds, bound,
                          call.component, peak, weights, expected))
    return RequestEstimate(generation, chips, mode, items, unit, tuple(parts))
