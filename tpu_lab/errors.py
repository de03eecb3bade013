"""The exception hierarchy of tpu_lab.

Every error says what was given, what is required and what to do about it.
"""

from __future__ import annotations


class TpuLabError(Exception):
    """Base class of every error tpu_lab raises on purpose."""


class TopologyError(TpuLabError, ValueError):
    """An unknown generation, chip count or topology name."""


class BackendConflictError(TpuLabError, RuntimeError):
    """torch_tpu is loaded in this process but there is no TPU to drive."""


class DeviceCoreError(TpuLabError, RuntimeError):
    """The bundled device's compiled core is not built, and could not be built here."""


class NotSimulatedError(TpuLabError, NotImplementedError):
    """A TorchTPU feature that only exists on real TPU hardware."""


class SpmdError(TpuLabError, RuntimeError):
    """An SPMD cell failed on some ranks (raised, died or hung), or the cluster is not running."""


class ShardingError(TpuLabError, ValueError):
    """A plan that cannot shard a model, or a mesh that cannot be built."""


class MediaError(TpuLabError, ValueError):
    """Input that cannot be shown or saved as an image or video."""


class DemoInputError(TpuLabError, ValueError):
    """An input of a demo app outside what it accepts."""


class DigitsInputError(TpuLabError, ValueError):
    """A class label, step count or guidance scale the digits model cannot use."""


class CharsInputError(TpuLabError, ValueError):
    """Text the tokenizer cannot encode, or a generation setting the model cannot use."""


class ShapesModelError(TpuLabError):
    """The shapes model folder is missing or not a FluxPipeline folder."""
