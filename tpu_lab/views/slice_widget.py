"""The slice widget: one way to run a model's step on a TPU slice, with controls for the
generation, the slice, the tensor parallelism, the batch, the sequence length (or an image
model's image size), the activation checkpointing and the list price; each change weighs the
step again (:func:`tpu_lab.sharding.chooser.weigh`) and redraws one chip's HBM at the step's
estimated peak, the expected time beside the idealised bound, what bounds it, the throughput
and the list price per step and per million tokens (or per image).

``SliceWidget(config("llama-3.1-8b"), "train", batch=64, seq=4096)`` (or ``%tpu plan MODEL
--widget --batch 64 --seq 4096``). What the controls set are synced traits (``generation``,
``devices``, ``tp``, ``batch``, ``seq``, ``image_size``, ``remat``, ``commitment``), settable
from Python too; Python validates each change, and where it is refused (a batch that does not
split, a tensor parallelism the model's heads do not allow) it sets ``error`` to why and how to
fix it and puts the traits back as they were: the widget keeps its last good state. The front
end (widgets/slice.js) only draws the rows computed here (:mod:`._slice_rows`); where no widget
manager runs, the same rows render as text and HTML (:class:`SliceView`).
"""

from __future__ import annotations

import torch
import traitlets

from .. import _install
from ..errors import TpuLabError
from ..hardware.prices import price
from ..hardware.topology import GENERATIONS, generation_named
from ..sharding import chooser
from ..sharding.info import dtype_name
from ..sharding.remat import check as check_remat
from ..sharding.step_estimate import check_task
from ._slice_rows import SliceInputs, SliceView, Step, parse_image_size, rows, tp_degrees
from ._widget_files import widget_file

try:
    import anywidget
except ImportError as exc:  # the [lab] extra
    raise ImportError(
        f"The slice widget needs anywidget: {_install.hint('lab')}. Without it, "
        "tpu_lab.sharding.chooser.weigh() and choose() give the same estimates, drawn as text "
        "and HTML."
    ) from exc

__all__ = ["SliceView", "SliceWidget"]

#: The traits the controls set, in the order a change is settled.
INPUTS = ("generation", "devices", "tp", "batch", "seq", "image_size", "remat", "commitment")


class SliceWidget(anywidget.AnyWidget):
    """One way to run ``task`` (train, forward or decode) of ``config`` (a transformers or
    diffusers config, or a model on the meta device) on a TPU slice, with controls; see the
    module's docstring. ``devices``: the slice as its name counts it (``v6e-8``: 8; a TPU7x chip
    shows two devices), by default the generation's largest one-host slice; ``tp``: the tensor
    parallelism, the rest of the slice FSDP (training) or data-parallel replicas (inference),
    by default the least that splits the batch; ``max_chips``: the largest slice offered.
    ``option`` is the weighed option the widget shows."""

    _esm = widget_file("slice.js")
    _css = widget_file("slice.css")

    generation = traitlets.Unicode("v6e").tag(sync=True)
    #: The slice's devices, the batch, the tensor parallelism and the sequence length are whole
    #: numbers; anything else set from the front end is refused with ``error``.
    devices = traitlets.Any(8).tag(sync=True)
    tp = traitlets.Any(1).tag(sync=True)
    batch = traitlets.Any(1).tag(sync=True)
    seq = traitlets.Any(None, allow_none=True).tag(sync=True)  # None for an image model
    image_size = traitlets.Unicode("").tag(sync=True)  # "1024x1024" for an image model
    remat = traitlets.Unicode("none").tag(sync=True)
    commitment = traitlets.Unicode("on-demand").tag(sync=True)
    header = traitlets.Dict().tag(sync=True)
    controls = traitlets.List().tag(sync=True)
    hbm = traitlets.Dict().tag(sync=True)
    result = traitlets.Dict().tag(sync=True)
    #: What is being estimated while Python weighs a change ("" when idle).
    busy = traitlets.Unicode("").tag(sync=True)
    error = traitlets.Unicode("").tag(sync=True)
    updates = traitlets.Int(0).tag(sync=True)

    def __init__(self, config, task: str = "train", *, batch: int, seq: int | None = None,
                 image_size: tuple[int, int] | None = None, frames: int | None = None,
                 generation: str = "v6e", devices: int | None = None, tp: int | None = None,
                 remat: str = "none", commitment: str = "on-demand", mode: str = "compiled",
                 dtype: torch.dtype = torch.bfloat16, max_chips: int = 256,
                 text_tokens: int | None = None, **kwargs) -> None:
        check_task(task)
        if (seq is None) == (image_size is None):
            raise TpuLabError("The slice widget weighs one step: give seq= (a language model's "
                              "tokens per sequence) or image_size=(height, width) (an image "
                              "model's pixels), not both.")
        generation_named(generation)
        if isinstance(max_chips, bool) or not isinstance(max_chips, int) or max_chips < 1:
            raise TpuLabError(f"max_chips must be a positive whole number, got {max_chips!r}.")
        super().__init__(**kwargs)
        self._config, self._frames, self._text_tokens = config, frames, text_tokens
        self._mode, self._dtype = mode, dtype
        self._image = seq is None  # an image model: image_size is its control, not seq
        self._step = Step(task, mode, dtype_name(dtype), max_chips, frames)
        if devices is None:
            devices = max(GENERATIONS[generation].topologies)
        if tp is None:  # the least that splits the batch (else the most, for the error)
            degrees = tp_degrees(generation, devices) or [1]
            tp = next((t for t in degrees if isinstance(batch, int) and batch > 0
                       and batch % (devices // t) == 0), degrees[-1])
        wanted: SliceInputs = {
            "generation": generation, "devices": devices, "tp": tp, "batch": batch, "seq": seq,
            "image_size": "" if image_size is None else f"{image_size[0]}x{image_size[1]}",
            "remat": remat, "commitment": commitment}
        self._writing = False
        inputs = self._settled(wanted, "")
        self._good = inputs
        self.option = self._weigh(inputs)  # refuses what cannot be weighed, with the fix
        self._show(inputs)
        self.observe(self._on_input, names=list(INPUTS))

    # -- settling a change ----------------------------------------------------------------------

    def inputs(self) -> SliceInputs:
        """What the controls hold now."""
        return {name: getattr(self, name) for name in INPUTS}  # type: ignore[return-value]

    @staticmethod
    def _whole(name: str, value) -> int:
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise TpuLabError(f"{name} must be a positive whole number; got {value!r}.")
        return value

    def _settled(self, wanted: SliceInputs, changed: str) -> SliceInputs:
        """``wanted`` checked, and made whole where a change left the rest behind: a new
        generation keeps the slice's devices where it has that slice (else takes the nearest),
        a new slice keeps the tensor parallelism where it splits it (else the largest that
        does). Raises what refuses it."""
        gen = wanted["generation"]
        generation_named(gen)
        devices = self._whole("devices", wanted["devices"])
        tp = self._whole("tp", wanted["tp"])
        batch = self._whole("batch", wanted["batch"])
        offered = chooser.slices(gen, 1 << 20)
        if changed == "generation" and devices not in offered:
            devices = min(offered, key=lambda d: (abs(d - devices), d))
        if changed in ("generation", "devices") and tp not in tp_degrees(gen, devices):
            tp = max((t for t in tp_degrees(gen, devices) if t <= tp), default=1)
        seq, image = wanted["seq"], wanted["image_size"]
        if self._image:
            if parse_image_size(image) is None:
                raise TpuLabError(f"image_size must be HEIGHTxWIDTH in pixels, e.g. 1024x1024; "
                                  f"got {image!r}.")
            seq = None
        else:
            seq = self._whole("seq", seq)
        check_remat(wanted["remat"])
        if self._step.task != "train" and wanted["remat"] != "none":
            raise TpuLabError(f"remat {wanted['remat']!r} checkpoints a training step's "
                              f"activations; a {self._step.task} step keeps none: use 'none'.")
        price(gen, wanted["commitment"])  # refuses an unknown commitment
        return {"generation": gen, "devices": devices, "tp": tp, "batch": batch, "seq": seq,
                "image_size": image if seq is None else "", "remat": wanted["remat"],
                "commitment": wanted["commitment"]}

    def _weigh(self, inputs: SliceInputs) -> chooser.Option:
        return chooser.weigh(
            self._config, self._step.task, generation=inputs["generation"],
            devices=inputs["devices"], tp=inputs["tp"], batch=inputs["batch"], seq=inputs["seq"],
            image_size=parse_image_size(inputs["image_size"]), frames=self._frames,
            remat=inputs["remat"], mode=self._mode, dtype=self._dtype,
            commitment=inputs["commitment"], text_tokens=self._text_tokens)

    def _on_input(self, change) -> None:
        """A control (or code) set one of :data:`INPUTS`: weigh the step again, or refuse."""
        if self._writing:
            return
        wanted = self.inputs()
        if wanted == self._good:
            return
        try:
            inputs = self._settled(wanted, change["name"])
            what = f"{inputs['generation']}-{inputs['devices']}, tp {inputs['tp']}"
            self.busy = f"estimating {what}…"
            option = self._weigh(inputs)
        except TpuLabError as exc:
            self._refuse(str(exc))
        except Exception as exc:  # noqa: BLE001 (the widget stays usable; the reason is shown)
            self._refuse(f"Could not estimate this step ({type(exc).__name__}: {exc}); the "
                         "widget shows the last step it could.")
        else:
            self._good, self.option = inputs, option
            self._show(inputs)
        finally:
            self.busy = ""

    def _refuse(self, why: str) -> None:
        """Put the controls back as they were, say why."""
        self._write({**self._good, "error": why})

    def _show(self, inputs: SliceInputs) -> None:
        self._write({**inputs, **rows(inputs, self.option, self._step), "error": ""})

    def _write(self, values: dict) -> None:
        self._writing = True
        try:
            with self.hold_sync():
                for name, value in values.items():
                    if getattr(self, name) != value:
                        setattr(self, name, value)
                self.updates += 1  # the front end redraws once per update
        finally:
            self._writing = False

    # -- rendering without a widget manager -----------------------------------------------------

    def view(self) -> SliceView:
        """The same state as a static view (text and HTML)."""
        return SliceView(rows(self._good, self.option, self._step), self.error)

    def _repr_mimebundle_(self, **kwargs):
        bundle = super()._repr_mimebundle_(**kwargs)
        data, metadata = bundle if isinstance(bundle, tuple) else (bundle, {})
        return {**data, **self.view()._repr_mimebundle_()}, metadata
