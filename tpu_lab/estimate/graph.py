"""A program's time on an idealised chip, op by op (eager) or fused (a graph).

**Eager** (``DEFER_NEVER``): every op is its own program. It reads all its inputs from HBM and
writes its outputs; its time is the larger of its MXU time (padded FLOPs at peak) and its HBM
time (bytes at full bandwidth), plus one launch (``eager_launch_seconds``). Collectives run
one after another, between ops.

**Fused** (``DEFER_AND_FUSE`` graphs, ``torch.compile`` graphs, a model's step): the graph is
one program, cut into fusions the way XLA's producer-consumer fusion cuts it:

- each MXU op (an op with FLOPs: matmul, convolution, attention) is a fusion of its own;
- every other op joins the fusion of the op that produced its input, when that op is not an
  MXU op and no MXU op ran between them (a fusion never spans a matmul, which could depend on
  it): chains of elementwise ops, reductions, casts and reshapes are one fusion (except
  data movement that only matmuls read, which fuses into them as below, and data movement
  after a partial update such as writing a new token into a cache);
- a fusion made only of data movement (copies, casts, gathers, scatters, concatenation,
  repeats: :data:`tpu_lab.estimate.ops.DATA_MOVEMENT`) fuses into the MXU ops that read all
  its results (they read its inputs instead), and an MXU op whose results only such a fusion
  reads writes straight into it (as a grouped-matmul kernel gathers its operands and scatters
  its results);
- a fusion reads from HBM the values made outside it and writes the values read outside it
  (or by nobody: the graph's results); intermediates inside a fusion stay on chip.

Each fusion takes the larger of its MXU time and its HBM time. The collectives overlap the
fusions (XLA runs them asynchronously): the graph takes the larger of the fusions' total and
the collectives' total, plus one launch (``graph_launch_seconds``). This is an idealised
lower bound: XLA's real fusion, layout and scheduling decisions differ.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import replace

from ..hardware.chips import Chip
from .assumed import Assumptions, assumptions
from .collectives import functional_kind, ring_bytes
from .collectives import seconds as collective_seconds
from .memory import Span, compiled_lives, eager_lives, peak
from .ops import OpNumbers, OpSignature, is_data_movement, is_update, is_view, op_numbers
from .result import Estimate, OpCost, merged
from .trace import Program

MODES = ("eager", "fuse", "compiled")


def _short(name: str) -> str:
    return name.split(".", 1)[-1]


class Costing:
    """The bookkeeping both modes share: each record's numbers scaled to one chip."""

    def __init__(self, program: Program, chip: Chip, a: Assumptions, chips: int) -> None:
        self.p, self.chip, self.a, self.chips = program, chip, a, chips
        self.numbers: list[OpNumbers | None] = []
        for r in program.records:
            self.numbers.append(None if r.sig is None else op_numbers(r.sig, chip, a))

    def base(self, vid: int) -> int:
        return self.p.values[vid].base

    def work(self, i: int) -> float:
        """The part of record ``i``'s MXU work one chip does."""
        r = self.p.records[i]
        return r.share * r.scale

    def read(self, i: int, k: int) -> float:
        """Bytes record ``i`` reads for its ``k``-th input, on one chip."""
        r, n = self.p.records[i], self.numbers[i]
        if k >= len(n.reads):
            return 0.0
        return n.reads[k] * self.p.values[r.ins[k]].share * r.scale

    def write(self, i: int, k: int) -> float:
        r, n = self.p.records[i], self.numbers[i]
        if k >= len(n.writes):
            return 0.0
        return n.writes[k] * self.p.values[r.outs[k]].share * r.scale

    def collective(self, i: int) -> tuple[str, float, float, float] | None:
        """(kind, ICI bytes sent, DCN bytes sent, seconds) if record ``i`` is a collective."""
        r = self.p.records[i]
        if r.collective is not None:
            kind, group, network, nbytes = r.collective
        else:
            n = self.numbers[i]
            found = functional_kind(r.sig.name, sum(n.reads), sum(n.writes))
            if found is None:
                return None
            (kind, nbytes), group, network = found, self.chips, "ici"
        sent = ring_bytes(kind, nbytes, group)
        secs = collective_seconds(kind, nbytes, group, self.chip, network, self.a)
        return (kind, sent if network == "ici" else 0.0, sent if network == "dcn" else 0.0,
                secs)


def _shapes(sig: OpSignature | None) -> str:
    """The first output's shape: ``'8x4096'``, ``'scalar'``, or ``''`` without an output."""
    if sig is None:
        return ""
    return " ".join("x".join(map(str, o.shape)) or "scalar" for o in sig.outputs[:1])


def eager_op(sig: OpSignature, n: OpNumbers, chip: Chip, a: Assumptions, *,
             work: float = 1.0, hbm: float | None = None, launch: bool = True) -> OpCost:
    """One op run eagerly, as its own program: the part ``work`` of its MXU work (one chip's
    share), ``hbm`` bytes (default: all it reads and writes) and one eager launch. The one
    place an eager op is costed (``op_cost`` per op, ``cost(..., "eager")`` per program)."""
    return OpCost.of(sig.name, "matmul" if n.flops else "vector", bandwidth=chip.hbm_bandwidth,
                     flops=n.flops * work, padded_flops=n.padded_flops * work,
                     hbm_bytes=n.hbm_bytes if hbm is None else hbm,
                     compute_seconds=n.compute_seconds * work,
                     launch_seconds=a.eager_launch_seconds if launch else 0.0,
                     shapes=_shapes(sig))


def _collective_op(kind: str, ici: float, dcn: float, seconds: float, chip: Chip,
                   launch: float) -> OpCost:
    return OpCost.of(kind, "collective", bandwidth=chip.hbm_bandwidth, ici_bytes=ici,
                     dcn_bytes=dcn, collective_seconds=seconds, launch_seconds=launch)


def _eager(c: Costing) -> list[OpCost]:
    out = []
    for i, r in enumerate(c.p.records):
        coll = c.collective(i)
        if coll is not None:
            out.append(_collective_op(*coll, c.chip, c.a.eager_launch_seconds))
            continue
        if is_view(r.sig.func):
            continue
        hbm = sum(c.read(i, k) for k in range(len(r.ins))) + sum(
            c.write(i, k) for k in range(len(r.outs)))
        out.append(eager_op(r.sig, c.numbers[i], c.chip, c.a, work=c.work(i), hbm=hbm))
    return out


class Fusions:
    """Records cut into fusions (see the module's docstring)."""

    def __init__(self, c: Costing) -> None:
        self.c = c
        recs = c.p.records
        self.producer: dict[int, int] = {}
        self.readers: dict[int, set[int]] = defaultdict(set)
        self.parent = list(range(len(recs)))
        self.kind: list[str] = []
        for i, r in enumerate(recs):
            if r.sig is None or c.collective(i) is not None:
                self.kind.append("collective")
            elif is_view(r.sig.func):
                self.kind.append("view")
            else:
                self.kind.append("matmul" if c.numbers[i].flops else "vector")
            if self.kind[i] != "view":  # views are free and see through to their base
                for v in r.ins:
                    self.readers[c.base(v)].add(i)
            if self.kind[i] in ("matmul", "vector"):
                for v in r.outs:
                    self.producer[c.base(v)] = i
        self.segment, anchors = [], 0  # matmuls run before each op: fusions never span one
        for k in self.kind:
            self.segment.append(anchors)
            anchors += k == "matmul"
        for i, r in enumerate(recs):
            if self.kind[i] == "vector":
                for v in r.ins:
                    p = self.producer.get(c.base(v))
                    if p is not None and self._joins(i, p):
                        self._union(i, p)
        self.members: dict[int, list[int]] = defaultdict(list)
        for i, k in enumerate(self.kind):
            if k in ("matmul", "vector"):
                self.members[self.find(i)].append(i)
        self.moves = {g for g, ms in self.members.items() if self.kind[g] == "vector"
                      and all(is_data_movement(recs[m].sig.func)
                              and not is_update(recs[m].sig.func) for m in ms)}
        self.absorbed = {g for g in self.moves if self._only_read_by_matmuls(g)}
        self.on_chip: set[int] = set()  # values a matmul writes straight into a data fusion
        for ms in self.members.values():
            if self.kind[ms[0]] != "matmul":
                continue
            for v in recs[ms[0]].outs:
                users = {self.find(u) for u in self.readers[c.base(v)]}
                if len(users) == 1 and next(iter(users)) in self.moves - self.absorbed:
                    self.on_chip.add(c.base(v))

    def _joins(self, i: int, p: int) -> bool:
        """Whether op ``i`` fuses with the op ``p`` that made its input: any vector op joins a
        vector producer, except data movement that only matmuls read (it fuses into them
        instead) and data movement after a partial update (whose result a reader sees whole,
        not the update)."""
        if self.kind[p] != "vector" or self.segment[p] != self.segment[i]:
            return False
        func, made_by = self.c.p.records[i].sig.func, self.c.p.records[p].sig.func
        if not is_data_movement(func):
            return True
        if is_update(made_by):
            return False
        readers = {u for v in self.c.p.records[i].outs for u in self.readers[self.c.base(v)]}
        return not readers or any(self.kind[u] != "matmul" for u in readers)

    def find(self, i: int) -> int:
        while self.parent[i] != i:
            self.parent[i] = self.parent[self.parent[i]]
            i = self.parent[i]
        return i

    def _union(self, i: int, j: int) -> None:
        a, b = self.find(i), self.find(j)
        if a != b:
            self.parent[max(a, b)] = min(a, b)

    def produced(self, g: int) -> set[int]:
        return {self.c.base(v) for m in self.members[g] for v in self.c.p.records[m].outs}

    def _only_read_by_matmuls(self, g: int) -> bool:
        made = self.produced(g)
        outside = {u for v in made for u in self.readers[v] if self.find(u) != g}
        return bool(outside) and all(self.kind[u] == "matmul" for u in outside)

    def materialized(self, v: int) -> bool:
        """Whether value ``v`` is written to HBM: a graph's result, or read outside the
        fusion that made it (not what a fusion keeps on chip, nor what a matmul writes
        straight into a data fusion, nor a data fusion that matmuls read through)."""
        b = self.c.base(v)
        p = self.producer.get(b)
        if p is None:
            return True
        g = self.find(p)
        if b in self.on_chip or g in self.absorbed:
            return False
        users = self.readers[b]
        return not users or any(self.find(u) != g for u in users)

    def external_reads(self, g: int) -> float:
        """Bytes fusion ``g`` reads from HBM (each outside value once)."""
        c, made, seen, total = self.c, self.produced(g), set(), 0.0
        for m in self.members[g]:
            r = c.p.records[m]
            for k, v in enumerate(r.ins):
                b = c.base(v)
                if b in made or v in seen or b in self.on_chip:
                    continue
                seen.add(v)
                p = self.producer.get(b)
                if p is not None and self.find(p) in self.absorbed:
                    total += self.external_reads(self.find(p))
                else:
                    total += c.read(m, k)
        return total

    def writes(self, g: int) -> float:
        c, total = self.c, 0.0
        for m in self.members[g]:
            for k, v in enumerate(c.p.records[m].outs):
                b = c.base(v)
                if b in self.on_chip:
                    continue
                users = self.readers[b]
                if not users or any(self.find(u) != g for u in users):
                    total += c.write(m, k)
        return total


def _name(c: Costing, members: list[int]) -> str:
    names = Counter(_short(c.p.records[m].sig.name) for m in members)
    top = ", ".join(n for n, _ in names.most_common(3))
    more = f", +{len(names) - 3}" if len(names) > 3 else ""
    return f"fusion({top}{more})"


def _fused(c: Costing) -> tuple[list[OpCost], list[OpCost], Fusions]:
    f = Fusions(c)
    bw = c.chip.hbm_bandwidth
    ops, colls = [], []
    for g, ms in sorted(f.members.items()):
        if g in f.absorbed:
            continue
        hbm = f.external_reads(g) + f.writes(g)
        flops = sum(c.numbers[m].flops * c.work(m) for m in ms)
        padded = sum(c.numbers[m].padded_flops * c.work(m) for m in ms)
        compute = sum(c.numbers[m].compute_seconds * c.work(m) for m in ms)
        matmul = f.kind[g] == "matmul"
        ops.append(OpCost.of(
            c.p.records[g].sig.name if matmul else _name(c, ms), "matmul" if matmul else "fusion",
            bandwidth=bw, flops=flops, padded_flops=padded, hbm_bytes=hbm,
            compute_seconds=compute, shapes=_shapes(c.p.records[g].sig) if matmul else ""))
    for i, k in enumerate(f.kind):
        if k == "collective":
            colls.append(_collective_op(*c.collective(i), c.chip, 0.0))
    return ops, colls, f


def cost(program: Program, chip: Chip, mode: str = "compiled", *, chips: int = 1,
         title: str = "", items: float = 0.0, unit: str = "", notes: tuple[str, ...] = (),
         spans: tuple[Span, ...] = (), memory_notes: tuple[str, ...] = ()) -> Estimate:
    """The :class:`Estimate` of ``program`` on one chip of ``chips`` ``chip`` chips, run in
    ``mode`` ("eager": op by op; "fuse" or "compiled": one fused graph). A recorded program
    (one with buffers) also gets its peak HBM (:mod:`tpu_lab.estimate.memory`; ``spans``:
    bytes held over ranges of its ops, ``memory_notes``: what that peak assumes)."""
    from ..errors import TpuLabError

    if mode not in MODES:
        raise TpuLabError(f"mode must be one of {', '.join(MODES)}; got {mode!r}.")
    a = assumptions()
    c = Costing(program, chip, a, chips)
    if mode == "eager":
        costs = _eager(c)
        busy = sum(o.busy_seconds for o in costs)
        launch = sum(o.launch_seconds for o in costs)
        seconds = busy + launch
        coll_time = sum(o.collective_seconds for o in costs if o.kind == "collective")
        work = [o for o in costs if o.kind != "collective"]
    else:
        work, colls, fusions = _fused(c)
        launch = a.graph_launch_seconds
        coll_time = sum(o.collective_seconds for o in colls)
        busy = sum(o.busy_seconds for o in work)
        seconds = max(busy, coll_time) + launch
        costs = [*work, *colls, OpCost.of("graph launch", "launch", bandwidth=1.0,
                                          launch_seconds=launch)]
    shares = {
        "compute": sum(o.busy_seconds for o in work if o.bound == "compute"),
        "memory": sum(o.busy_seconds for o in work if o.bound != "compute"),
        "collective": coll_time if mode == "eager" or coll_time > busy else 0.0,
        "launch": launch,
    }
    total = {f: sum(getattr(o, f) for o in costs) for f in (
        "flops", "padded_flops", "hbm_bytes", "ici_bytes", "dcn_bytes", "compute_seconds",
        "memory_seconds")}
    memory = None
    if program.buffers:
        lives = eager_lives(program) if mode == "eager" else compiled_lives(program, fusions)
        memory = peak(program, lives, mode, spans=spans, notes=memory_notes)
    estimate = Estimate(
        title=title, chip=chip, chips=chips, mode=mode, seconds=seconds,
        flops=total["flops"], padded_flops=total["padded_flops"], hbm_bytes=total["hbm_bytes"],
        ici_bytes=total["ici_bytes"], dcn_bytes=total["dcn_bytes"],
        compute_seconds=total["compute_seconds"], memory_seconds=total["memory_seconds"],
        collective_seconds=coll_time, launch_seconds=launch,
        bound=max(shares, key=shares.get), ops=merged(costs), items=items, unit=unit,
        notes=notes, memory=memory,
    )
    return replace(estimate, expected_seconds=expected_seconds(estimate, a))


def expected_seconds(e: Estimate, a: Assumptions) -> float:
    """The time a real run of ``e`` takes, from the idealised estimate's terms, each named and
    fitted (:mod:`tpu_lab.estimate.assumed`): every op takes the larger of its MXU time at the
    generation's MXU efficiency and its HBM time at the HBM efficiency; collectives move at the
    HBM efficiency too; a compiled program overlaps ``collective_overlap`` of the shorter of
    its ops and its collectives (an eager one, op by op, none); the launches as they are; and
    the host's seconds per run."""
    mxu, hbm = a.mxu_efficiency(e.chip.generation), a.hbm_efficiency
    busy = sum(max(o.compute_seconds / mxu, o.memory_seconds / hbm) for o in e.ops
               if o.kind not in ("collective", "launch"))
    talk = e.collective_seconds / hbm
    if e.mode == "eager":
        run = busy + talk
    else:
        run = max(busy, talk) + (1 - a.collective_overlap) * min(busy, talk)
    return run + e.launch_seconds + a.host_seconds_per_step
