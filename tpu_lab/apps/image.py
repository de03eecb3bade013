"""``tpu-lab demo digits``: draw digits with the embedded diffusion model on the "tpu" device.

A Gradio Blocks app. Inputs: the digit, how many to draw (the batch: changing it changes the
shape the UNet sees, so a compiled UNet recompiles, and the panel says why), denoising steps,
seed, classifier-free guidance scale, display scale, and the execution mode (eager, eager with
TorchTPU's ``DEFER_AND_FUSE`` compile cache, or the UNet under
``torch.compile(backend="tpu")``). Outputs: the image, the denoising trajectory as an H.264
video, and the request's compilations, recompilations (with their reasons) and cache
statistics from :mod:`tpu_lab.events`. Requests queue one at a time (the device runs one
program at a time); the server listens on 127.0.0.1 unless told otherwise and makes no share
link unless asked.
"""

from __future__ import annotations

import inspect
import json
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import TpuLabError
from . import entry_points

#: Execution modes offered by the app.
EAGER, FUSED, COMPILED = "eager", "eager (DEFER_AND_FUSE)", "compiled"
MODES = (EAGER, FUSED, COMPILED)
#: Allowed ranges of the inputs (inclusive).
MAX_COUNT = 16
MAX_STEPS = 200
MAX_SCALE = 32
#: The digits model's guidance range: above 2 its samples turn to speckle (measured: see
#: tpu_lab.models.digits).
MAX_GUIDANCE = 2.0
MAX_SEED = 2**32 - 1
#: Frames per second of the trajectory video.
FPS = 8
#: Event kinds shown in the panel (syncs and transfers are only counted).
SHOWN = ("compile", "recompile", "cache_miss", "mode_change", "oom")


class DemoInputError(TpuLabError, ValueError):
    """An input of the demo outside what it accepts."""


@dataclass(frozen=True)
class Request:
    """One validated request."""

    label: int
    count: int
    steps: int
    seed: int
    guidance: float
    scale: int
    mode: str


@dataclass
class Report:
    """What the device did for one request: events, cache statistics, time."""

    mode: str
    seconds: float
    events: list[dict[str, Any]] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    cache: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "seconds": round(self.seconds, 3),
            "counts": self.counts,
            "cache": self.cache,
            "events": self.events,
        }


def _whole(value: Any, name: str, low: int, high: int) -> int:
    number = value
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            number = None
    if isinstance(number, float) and number.is_integer():
        number = int(number)
    if isinstance(number, bool) or not isinstance(number, int) or not low <= number <= high:
        raise DemoInputError(f"{name} must be a whole number from {low} to {high}; got {value!r}.")
    return number


def _real(value: Any, name: str, low: float, high: float) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = None
    if number is None or isinstance(value, bool) or not low <= number <= high:
        raise DemoInputError(f"{name} must be a number from {low:g} to {high:g}; got {value!r}.")
    return number


def check_request(label, count, steps, seed, guidance, scale, mode, classes: int = 10) -> Request:
    """The inputs as a :class:`Request`, or a :class:`DemoInputError` saying what to change."""
    if mode not in MODES:
        raise DemoInputError(f"mode must be one of {', '.join(MODES)}; got {mode!r}.")
    return Request(
        label=_whole(label, "Class", 0, classes - 1),
        count=_whole(count, "Images", 1, MAX_COUNT),
        steps=_whole(steps, "Steps", 1, MAX_STEPS),
        seed=_whole(seed, "Seed", 0, MAX_SEED),
        guidance=_real(guidance, "Guidance scale", 1.0, MAX_GUIDANCE),
        scale=_whole(scale, "Display scale", 1, MAX_SCALE),
        mode=mode,
    )


def load_model(path: str | Path | None = None, device: str = "tpu"):
    """The embedded digits pipeline, or the diffusers pipeline folder at ``path``: a
    ``DigitsPipeline`` folder (e.g. from ``scripts/train_digits.py``) or any class-conditional
    pipeline whose ``__call__`` takes ``class_labels`` and ``callback_on_step_end``."""
    from ..models.digits import digits_pipeline

    if path is None:
        return digits_pipeline(device=device)
    folder = Path(path).expanduser()
    index = folder / "model_index.json"
    if not index.is_file():
        raise TpuLabError(
            f"--model {path}: no model_index.json there; pass a diffusers pipeline folder "
            "(one written by save_pretrained)."
        )
    name = json.loads(index.read_text()).get("_class_name")
    if name == "DigitsPipeline":
        return digits_pipeline(device=device, path=folder)
    from diffusers import DiffusionPipeline

    pipe = DiffusionPipeline.from_pretrained(folder).to(device)
    params = inspect.signature(pipe.__call__).parameters
    missing = [p for p in ("class_labels", "callback_on_step_end") if p not in params]
    if missing:
        raise TpuLabError(
            f"--model {path}: {name} takes no {' or '.join(missing)}; the image demo draws "
            "with class-conditional pipelines that report their steps (DigitsPipeline)."
        )
    return pipe


def _classes(pipe) -> int:
    from ..models.digits import CLASSES, DigitsPipeline

    if isinstance(pipe, DigitsPipeline):
        return len(CLASSES)
    config = getattr(pipe, "unet", None) or getattr(pipe, "transformer", None)
    config = getattr(config, "config", None)
    for key in ("num_class_embeds", "num_embeds_ada_norm"):
        n = getattr(config, key, None)
        if isinstance(n, int) and n > 0:
            return n
    raise TpuLabError(f"{type(pipe).__name__}: cannot tell how many classes it draws.")


def _denoiser(pipe) -> str:
    for name in ("unet", "transformer"):
        if getattr(pipe, name, None) is not None:
            return name
    raise TpuLabError(f"{type(pipe).__name__} has no unet or transformer to compile.")


def measured(mode: str, work) -> tuple[Any, Report]:
    """``work()`` run in ``mode`` (under ``DEFER_AND_FUSE`` for :data:`FUSED`): its result and
    the :class:`Report` of its time, events and compile-cache statistics."""
    import torch

    from .. import backend

    seq, cache_before = _last_seq(), backend().cache_stats()
    start = time.perf_counter()
    if mode == FUSED:
        with torch.tpu.set_eager_mode(torch.tpu.EagerMode.DEFER_AND_FUSE):
            result = work()
    else:
        result = work()
    seconds = time.perf_counter() - start
    events = _events_after(seq)
    cache_after = backend().cache_stats()
    report = Report(
        mode=mode,
        seconds=seconds,
        events=[_event_row(e) for e in events if e.kind in SHOWN],
        counts={
            k: n
            for k in ("compile", "recompile", "cache_hit", "cache_miss", "sync", "transfer")
            if (n := sum(e.kind == k for e in events))
        },
        cache={k: cache_after[k] - cache_before[k] for k in cache_after},
    )
    return result, report


def _events_after(seq: int) -> list:
    from ..events import log

    return [e for e in log.events() if e.seq > seq]


def _last_seq() -> int:
    from ..events import log

    events = log.events()
    return events[-1].seq if events else 0


def _event_row(e) -> dict[str, Any]:
    row = {"seq": e.seq, "kind": e.kind, "summary": e.summary}
    for key in ("reason", "changes", "hints", "compile_seconds", "graph_ops"):
        if key in e.details:
            row[key] = e.details[key]
    return row


class ImageDemo:
    """The app's state: one pipeline, its compiled twin (made on first use), a folder for the
    videos, and the handler :meth:`generate`."""

    def __init__(self, pipe, *, title: str = "Draw a digit") -> None:
        self.pipe = pipe
        self.pipe.set_progress_bar_config(disable=True)
        self.classes = _classes(pipe)
        self.title = title
        self._compiled = None
        self._videos = tempfile.TemporaryDirectory(prefix="tpu_lab_demo_")

    def close(self) -> None:
        self._videos.cleanup()

    def pipeline(self, mode: str):
        """The pipeline for ``mode``: the compiled one has its denoiser under
        ``torch.compile(backend="tpu", fullgraph=True, dynamic=False)``."""
        if mode != COMPILED:
            return self.pipe
        if self._compiled is None:
            import torch

            name = _denoiser(self.pipe)
            module = torch.compile(
                getattr(self.pipe, name), backend="tpu", fullgraph=True, dynamic=False
            )
            self._compiled = type(self.pipe)(**{**self.pipe.components, name: module})
            self._compiled.set_progress_bar_config(disable=True)
        return self._compiled

    def run(self, request: Request, on_step=None):
        """Draw ``request``: (image, MP4 bytes, :class:`Report`)."""
        import torch

        from ..media import Trajectory, encode_mp4
        from ..media.grid import grid

        pipe = self.pipeline(request.mode)
        trajectory = Trajectory(pipe)

        def callback(p, step, t, tensors):
            trajectory(p, step, t, tensors)
            if on_step is not None:
                on_step(step + 1, request.steps)
            return tensors

        kwargs = {
            "class_labels": [request.label] * request.count,
            "num_inference_steps": request.steps,
            "generator": torch.Generator("cpu").manual_seed(request.seed),
            "output_type": "np",
            "callback_on_step_end": callback,
            "callback_on_step_end_tensor_inputs": ["latents"],
        }
        if "guidance_scale" in inspect.signature(pipe.__call__).parameters:
            kwargs["guidance_scale"] = request.guidance
        images, report = measured(request.mode, lambda: pipe(**kwargs).images)
        frames = [_enlarge(f, request.scale) for f in trajectory.frames()]
        # The images laid out as the video's frames are (media's grid of the batch).
        picture = grid(list((images * 255).round().astype("uint8")))
        return _enlarge(picture, request.scale), encode_mp4(frames, fps=FPS), report

    def generate(self, label, count, steps, seed, guidance, scale, mode, progress=None):
        """The Gradio handler: (image, video path, events HTML, report dict)."""
        import gradio as gr

        try:
            request = check_request(
                label, count, steps, seed, guidance, scale, mode, classes=self.classes
            )
            on_step = (lambda i, n: progress((i, n), desc="denoising")) if progress else None
            image, video, report = self.run(request, on_step)
        except TpuLabError as exc:
            raise gr.Error(str(exc)) from exc
        path = Path(self._videos.name) / f"trajectory-{time.time_ns()}.mp4"
        path.write_bytes(video)
        return image, str(path), _report_html(report), report.to_dict()

    def blocks(self):
        """The Gradio Blocks of the app."""
        import gradio as gr

        digits = self.classes <= 20
        with gr.Blocks(title=f"tpu_lab: {self.title}") as demo:
            gr.Markdown(
                f"## {self.title}\nThe embedded diffusion model on the `tpu` device "
                f"({_device_line()}). Changing **Images** changes the batch the UNet sees: "
                "in compiled mode that is a recompilation, shown below with its reason."
            )
            with gr.Row():
                with gr.Column(scale=1):
                    if digits:
                        label = gr.Dropdown(list(range(self.classes)), value=7, label="Class")
                    else:
                        label = gr.Number(0, precision=0, label=f"Class (0-{self.classes - 1})")
                    # Typed numbers are checked by the handler, which names the field
                    # in its message (Gradio's own range checks do not).
                    count = gr.Number(4, label=f"Images (1-{MAX_COUNT}, the batch)")
                    steps = gr.Number(32, label=f"Steps (1-{MAX_STEPS})")
                    seed = gr.Number(0, label="Seed")
                    guidance = gr.Slider(
                        1,
                        MAX_GUIDANCE,
                        value=_default_guidance(self.pipe),
                        step=0.25,
                        label="Guidance scale (1 = none)",
                    )
                    scale = gr.Slider(1, MAX_SCALE, value=16, step=1, label="Display scale")
                    mode = gr.Radio(list(MODES), value=EAGER, label="Execution")
                    button = gr.Button("Generate", variant="primary", elem_id="generate")
                with gr.Column(scale=2):
                    image = gr.Image(
                        label="Digits", type="pil", format="png", height=320, elem_id="digits-image"
                    )
                    video = gr.Video(
                        label="Denoising trajectory",
                        elem_id="trajectory",
                        autoplay=True,
                        loop=True,
                        height=320,
                    )
            events = gr.HTML(label="Device events", elem_id="events")
            report = gr.JSON(label="Request report", elem_id="report")

            def generate(label, count, steps, seed, guidance, scale, mode, progress=gr.Progress()):  # noqa: B008 (Gradio's way)
                return self.generate(label, count, steps, seed, guidance, scale, mode, progress)

            button.click(
                generate,
                [label, count, steps, seed, guidance, scale, mode],
                [image, video, events, report],
                api_name="generate",
            )
        demo.queue(default_concurrency_limit=1)
        return demo


def _default_guidance(pipe) -> float:
    """The pipeline's own default ``guidance_scale`` (1 when it has none), within the slider."""
    param = inspect.signature(pipe.__call__).parameters.get("guidance_scale")
    value = param.default if param is not None else 1.0
    return min(max(float(value), 1.0), MAX_GUIDANCE) if isinstance(value, (int, float)) else 1.0


def _device_line() -> str:
    from .. import backend

    status = backend().status()
    return status.device_name + (", on the CPU" if status.simulated else "")


def _enlarge(image, scale: int):
    from PIL import Image

    if scale == 1:
        return image
    return image.resize((image.width * scale, image.height * scale), Image.Resampling.NEAREST)


def _report_html(report: Report) -> str:
    from html import escape

    counts = ", ".join(f"{n} {k}" for k, n in report.counts.items()) or "no events"
    cache = ", ".join(f"{k} {v}" for k, v in report.cache.items())
    rows = "".join(
        f"<tr><td>{e['seq']}</td><td>{escape(e['kind'])}</td><td>{escape(e['summary'])}"
        + "".join(f"<div>fix: {escape(h)}</div>" for h in e.get("hints", ()))
        + "</td></tr>"
        for e in report.events
    )
    if rows:
        table = f"<table><tr><th>#</th><th>kind</th><th>what happened</th></tr>{rows}</table>"
    elif report.mode == EAGER:
        table = "<p>Eager: op by op, nothing compiled.</p>"
    else:
        table = "<p>No compilation in this request: every graph came from the cache.</p>"
    return (
        f"<div class='tpu-lab-events'><p><b>{escape(report.mode)}</b> in "
        f"{report.seconds:.2f} s (host time) &middot; events: {escape(counts)} &middot; "
        f"eager compile cache: {escape(cache)}</p>{table}</div>"
    )


build, launch = entry_points(
    lambda model, device: ImageDemo(load_model(model, device)), "the embedded digits model"
)
