"""Peak HBM of a recorded program, on one chip, from the lives of its buffers.

A program recorded by :class:`~tpu_lab.estimate.trace.Recorder` knows each storage its tensors
lived in (:class:`~tpu_lab.estimate.trace.Buffer`): its bytes, the op that made it and the op
before which it was freed. One chip holds each buffer's share (the share of the value that
made it: ``1/tp`` of a split weight's, ``1/fsdp`` of what FSDP shards).

- **eager** (``DEFER_NEVER``, what the bundled device and TorchTPU's eager mode run): an op's
  outputs are allocated when it runs and freed when the program lets go of their last tensor,
  as the run did. The HBM in use after op ``i`` is every buffer made at or before ``i`` and
  not yet freed; the peak is the largest of these. The bundled device measures exactly this
  (``torch.accelerator.max_memory_allocated()``).
- **fuse** / **compiled** (a ``DEFER_AND_FUSE`` graph, a ``torch.compile`` graph, a step as
  one XLA program): a buffer lives from the op that first writes it to the last op that reads
  it (an XLA program frees a buffer after its last use, not when Python lets go), and the
  intermediates a fusion keeps on chip are never allocated (the fusions of
  :mod:`tpu_lab.estimate.graph`, which calls :func:`peak` as it costs the program). Buffers
  that existed before the step (weights, optimizer state, KV cache, inputs) live throughout.
  XLA's scheduler may order the ops to lower the peak, and its buffer assignment may share or
  pad buffers: not modelled.

What fills HBM at the peak is told by what each buffer holds: the caller names those that
existed before (weights, optimizer state, KV cache, inputs: any other that existed before is an
input) and the gradients; of those made in the run, those made before the backward began and
still alive when it began are activations saved for backward, the rest temporaries.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import TpuLabError
from .trace import Program

KINDS = ("weights", "gradients", "optimizer state", "activations saved for backward",
         "KV cache", "inputs", "temporaries", "gathered weights (FSDP)")
MODES = ("eager", "fuse", "compiled")


@dataclass(frozen=True)
class Memory:
    """One chip's HBM over a program: the ``peak_bytes`` (an estimate, labelled so wherever
    shown), the op it is reached at (``at``, the ``at_index``-th record) and, at the peak,
    what fills it (``breakdown``: (kind, bytes), the largest first; kinds are :data:`KINDS`).
    ``mode`` is how the program runs (see the module's docstring)."""

    mode: str
    peak_bytes: float
    at: str
    at_index: int
    breakdown: tuple[tuple[str, float], ...]
    notes: tuple[str, ...] = ()

    def of(self, kind: str) -> float:
        """The bytes of ``kind`` at the peak (0 when none)."""
        return dict(self.breakdown).get(kind, 0.0)


@dataclass(frozen=True)
class Span:
    """Extra bytes one chip holds from record ``first`` to record ``last`` (both included):
    an FSDP unit's weights, gathered while its ops run."""

    first: int
    last: int
    nbytes: float
    kind: str = "gathered weights (FSDP)"


def classify(program: Program, backward_at: int | None) -> None:
    """Give every buffer without a kind one (see the module's docstring): one that existed
    before the run is an input."""
    for b in program.buffers:
        if b.kind:
            continue
        if b.made < 0:
            b.kind = "inputs"
            continue
        saved = (backward_at is not None and b.made < backward_at
                 and (b.freed is None or b.freed > backward_at))
        b.kind = "activations saved for backward" if saved else "temporaries"


def _share(program: Program, index: int) -> float:
    buffer = program.buffers[index]
    return program.values[buffer.value].share * buffer.scale


def eager_lives(program: Program) -> list[tuple[int, int] | None]:
    """(first, last) record each buffer is alive at, as the run let go of it."""
    end = len(program.records) - 1
    return [(max(b.made, 0), end if b.freed is None else b.freed - 1) for b in program.buffers]


def compiled_lives(program: Program, fusions) -> list[tuple[int, int] | None]:
    """(first, last) record each buffer is alive at in one program, from the first op that
    writes it to the last that reads it (None: never allocated, it stays on chip inside a
    fusion; ``fusions.materialized(value)`` says which values are written to HBM)."""
    end = len(program.records) - 1
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    materialized: set[int] = set()
    for i, r in enumerate(program.records):
        for v in r.ins:
            b = program.values[v].buffer
            if b >= 0:
                last[b] = i
        for v in r.outs:
            b = program.values[v].buffer
            if b < 0:
                continue
            first.setdefault(b, i)
            if b not in materialized and fusions.materialized(v):
                materialized.add(b)
    lives: list[tuple[int, int] | None] = []
    for b, buffer in enumerate(program.buffers):
        if buffer.made < 0:
            lives.append((0, end))
        elif b not in materialized:
            lives.append(None)
        else:
            lives.append((first[b], max(last.get(b, first[b]), first[b])))
    return lives


def peak(program: Program, lives: list[tuple[int, int] | None], mode: str, *,
         spans: tuple[Span, ...] = (), notes: tuple[str, ...] = ()) -> Memory:
    """The :class:`Memory` of ``program`` on one chip, its buffers alive over ``lives``
    (:func:`eager_lives` or :func:`compiled_lives`: how it runs in ``mode``); ``spans`` add
    bytes held over ranges of records (FSDP's gathered weights). Buffers without a kind count
    as temporaries (:func:`classify` first to tell activations apart)."""
    if mode not in MODES:
        raise TpuLabError(f"mode must be one of {', '.join(MODES)}; got {mode!r}.")
    if not program.records:
        raise TpuLabError("No ops were recorded: there is no step to find the peak of.")
    n = len(program.records)
    delta = [0.0] * (n + 1)
    for b, life in enumerate(lives):
        if life is not None and life[0] <= life[1]:
            nbytes = program.buffers[b].nbytes * _share(program, b)
            delta[life[0]] += nbytes
            delta[life[1] + 1] -= nbytes
    for s in spans:
        delta[s.first] += s.nbytes
        delta[s.last + 1] -= s.nbytes
    at, level, best = 0, 0.0, -1.0
    for i in range(n):
        level += delta[i]
        if level > best:
            at, best = i, level
    held: dict[str, float] = {}
    for b, life in enumerate(lives):
        if life is not None and life[0] <= at <= life[1]:
            kind = program.buffers[b].kind or "temporaries"
            held[kind] = held.get(kind, 0.0) + program.buffers[b].nbytes * _share(program, b)
    for s in spans:
        if s.first <= at <= s.last:
            held[s.kind] = held.get(s.kind, 0.0) + s.nbytes
    record = program.records[at]
    name = record.sig.name if record.sig is not None else (record.collective or ("",))[0]
    breakdown = tuple(sorted(((k, v) for k, v in held.items() if v > 0), key=lambda kv: -kv[1]))
    return Memory(mode, best, name, at, breakdown, notes)
