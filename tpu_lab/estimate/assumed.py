"""The assumed constants of every estimate: named, explained, settable.

The chips' figures (:mod:`tpu_lab.hardware.chips`) are published; these are not. Each one
says where it comes from or why it has its value. One set serves every estimate. The
efficiencies of the expected time (how much of the idealised chip a real run gets) are fitted
on published runs by ``scripts/fit_expected.py``, which writes them, with the data they came
from, to ``fitted.json`` beside this module; the defaults here are read from it.

Read the current set with :func:`assumptions`; change one for the rest of the session with the
property of the same name on :data:`settings` (``settings.eager_launch_seconds = 5e-6``); change
some for a block with :func:`assume`, which restores the previous set when the block ends.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

from ..errors import TpuLabError

#: The fitted efficiencies (``scripts/fit_expected.py`` writes the file).
FITTED_FILE = Path(__file__).with_name("fitted.json")
_FITTED: dict[str, float] = json.loads(FITTED_FILE.read_text())["parameters"]


@dataclass(frozen=True)
class Assumptions:
    """The constants an estimate assumes (see each field's comment for its source)."""

    #: Seconds to launch one op in eager mode (``DEFER_NEVER``): the host dispatches the op and
    #: the runtime starts one device program for it. Reasoning, not a measurement: a CUDA kernel
    #: launch costs about 5 µs and an XLA program launch through a runtime costs more; 10 µs is
    #: the order of magnitude. Profile your own ops and set it.
    eager_launch_seconds: float = 10e-6
    #: Seconds to launch one compiled graph (a ``DEFER_AND_FUSE`` graph, a ``torch.compile``
    #: graph, a training step): one program start, same reasoning as above.
    graph_launch_seconds: float = 20e-6
    #: Seconds of latency per ring step of a collective (one ICI hop): the scaling book's
    #: "per-hop latency for TPU v5e is 1us" (jax-ml/scaling-book ``tpus.md``, Question 5).
    hop_seconds: float = 1e-6
    #: MXU passes of a float32 matmul: 1 at TorchTPU's default precision (bfloat16 inputs,
    #: float32 accumulation; ``torch.tpu.Precision.DEFAULT``), 3 at HIGH, 6 at HIGHEST.
    f32_matmul_passes: int = 1
    #: The share of the MXU's peak a real run's matmuls reach, per generation (fitted; the MXU's
    #: tile padding is in the idealised time already): the expected time of an op bound by its
    #: FLOPs is its idealised time over this.
    mxu_efficiency_v4: float = _FITTED["mxu_efficiency_v4"]
    mxu_efficiency_v5e: float = _FITTED["mxu_efficiency_v5e"]
    mxu_efficiency_v5p: float = _FITTED["mxu_efficiency_v5p"]
    mxu_efficiency_v6e: float = _FITTED["mxu_efficiency_v6e"]
    mxu_efficiency_v7: float = _FITTED["mxu_efficiency_v7"]
    #: The share of HBM's published bandwidth a real run's ops reach (fitted), and of the
    #: links' for collectives (no published run separates the two).
    hbm_efficiency: float = _FITTED["hbm_efficiency"]
    #: The share of a compiled program's collectives that overlap its ops (fitted): the
    #: idealised chip overlaps them all; a real one exposes ``1 - overlap`` of the shorter.
    collective_overlap: float = _FITTED["collective_overlap"]
    #: Seconds the host adds to every run of a program (fitted): input feeding, dispatch,
    #: the step's bookkeeping between programs.
    host_seconds_per_step: float = _FITTED["host_seconds_per_step"]

    def mxu_efficiency(self, generation: str) -> float:
        """The fitted MXU efficiency of ``generation`` (``'v6e'``)."""
        return getattr(self, f"mxu_efficiency_{generation}")

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise TpuLabError(
                    f"assumption {f.name} must be a number >= 0, got {value!r}; for example "
                    f"{f.name}={f.default!r}."
                )
            share = "efficiency" in f.name
            if (share and not 0 < value <= 1) or (f.name == "collective_overlap" and value > 1):
                span = "(0, 1]" if share else "[0, 1]"
                raise TpuLabError(
                    f"assumption {f.name} is a share: it must be in {span}, got {value!r}; for "
                    f"example {f.name}={f.default!r}."
                )


DEFAULT = Assumptions()
_current = [DEFAULT]
_changes = [0]  # counts every change, so that caches of costs can tell sets apart cheaply


def assumptions() -> Assumptions:
    """The constants in force now."""
    return _current[0]


def version() -> int:
    """A number that changes whenever the constants in force change."""
    return _changes[0]


def _set(value: Assumptions) -> None:
    _current[0] = value
    _changes[0] += 1


def _replaced(changes: dict) -> Assumptions:
    names = {f.name for f in dataclasses.fields(Assumptions)}
    unknown = sorted(set(changes) - names)
    if unknown:
        raise TpuLabError(
            f"Unknown assumption {unknown[0]!r}; the assumptions are {', '.join(sorted(names))}."
        )
    return dataclasses.replace(_current[0], **changes)


@contextlib.contextmanager
def assume(**changes):
    """Estimate with some constants changed inside the block, e.g.
    ``with assume(eager_launch_seconds=5e-6): ...``; the previous set returns after it."""
    before = _current[0]
    _set(_replaced(changes))
    try:
        yield _current[0]
    finally:
        _set(before)


class _Setting:
    """One assumption as a property of :data:`settings` (read and set for the session)."""

    def __set_name__(self, owner, name: str) -> None:
        self.name = name

    def __get__(self, obj, owner=None):
        return getattr(_current[0], self.name)

    def __set__(self, obj, value) -> None:
        _set(_replaced({self.name: value}))


class Settings:
    """Session-wide assumptions: ``settings.hop_seconds = 2e-6``; ``settings.reset()``."""

    eager_launch_seconds = _Setting()
    graph_launch_seconds = _Setting()
    hop_seconds = _Setting()
    f32_matmul_passes = _Setting()
    mxu_efficiency_v4 = _Setting()
    mxu_efficiency_v5e = _Setting()
    mxu_efficiency_v5p = _Setting()
    mxu_efficiency_v6e = _Setting()
    mxu_efficiency_v7 = _Setting()
    hbm_efficiency = _Setting()
    collective_overlap = _Setting()
    host_seconds_per_step = _Setting()

    def reset(self) -> None:
        """Back to the documented defaults."""
        _set(DEFAULT)

    def __repr__(self) -> str:
        return repr(_current[0])


settings = Settings()
