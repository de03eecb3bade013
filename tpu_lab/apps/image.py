"""``tpu-lab demo digits``: draw digits with the embedded diffusion model on the "tpu" device.

A Gradio Blocks app. Inputs: the digit, how many to draw (the batch: changing it changes the
shape the UNet sees, so a compiled UNet recompiles, and the panel says why), denoising steps,
seed, classifier-free guidance scale, display scale, and the mode (:data:`.shared.DEMO_MODES`:
eager, TorchTPU's ``DEFER_AND_FUSE`` compile cache, or the UNet compiled:
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
from dataclasses import dataclass
from pathlib import Path

from ..errors import TpuLabError
from ..session import COMPILED
from . import entry_points
from .estimated import Call, estimate_request
from .shared import (
    FPS,
    MAX_SEED,
    check_mode,
    device_line,
    enlarge,
    measured,
    mode_input,
    real,
    report_html,
    report_outputs,
    trajectory_output,
    whole,
)

#: Allowed ranges of the inputs (inclusive).
MAX_COUNT = 16
MAX_STEPS = 200
MAX_SCALE = 32
#: The digits model's guidance range: above 2 its samples turn to speckle (measured: see
#: tpu_lab.models.digits).
MAX_GUIDANCE = 2.0


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


def check_request(label, count, steps, seed, guidance, scale, mode, classes: int = 10) -> Request:
    """The inputs as a :class:`Request`, or a :class:`~tpu_lab.errors.DemoInputError` saying
    what to change."""
    return Request(
        label=whole(label, "Class", 0, classes - 1),
        count=whole(count, "Images", 1, MAX_COUNT),
        steps=whole(steps, "Steps", 1, MAX_STEPS),
        seed=whole(seed, "Seed", 0, MAX_SEED),
        guidance=real(guidance, "Guidance scale", 1.0, MAX_GUIDANCE),
        scale=whole(scale, "Display scale", 1, MAX_SCALE),
        mode=check_mode(mode),
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
        if mode != COMPILED.value:
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
        """Draw ``request``: (image, MP4 bytes, :class:`~.shared.Report`)."""
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
        guided = "guidance_scale" in inspect.signature(pipe.__call__).parameters
        if guided:
            kwargs["guidance_scale"] = request.guidance
        images, report = measured(request.mode, lambda: pipe(**kwargs).images)
        report.estimate = self.estimated(request, guided and request.guidance > 1)
        frames = [enlarge(f, request.scale) for f in trajectory.frames()]
        # The images laid out as the video's frames are (media's grid of the batch).
        picture = grid(list((images * 255).round().astype("uint8")))
        return enlarge(picture, request.scale), encode_mp4(frames, fps=FPS), report

    def estimated(self, request: Request, guided: bool):
        """The request's estimated TPU time: the denoiser once a step on its sample (the
        pipeline's own size), on twice the batch when ``guided`` (classifier-free guidance, as
        DigitsPipeline runs it). :func:`.estimated.estimate_request`."""
        name = _denoiser(self.pipe)
        size = getattr(self.pipe, name).config.sample_size
        batch = request.count * (2 if guided else 1)
        call = Call("UNet" if name == "unet" else name, name, request.steps, batch,
                    image_size=(size, size))
        return estimate_request(self.pipe, [call], chips=1, mode=request.mode,
                                items=request.count, unit="image")

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
        return image, str(path), report_html(report), report.to_dict()

    def blocks(self):
        """The Gradio Blocks of the app."""
        import gradio as gr

        digits = self.classes <= 20
        with gr.Blocks(title=f"tpu_lab: {self.title}") as demo:
            gr.Markdown(
                f"## {self.title}\nThe embedded diffusion model on the `tpu` device "
                f"({device_line()}). Changing **Images** changes the batch the UNet sees: "
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
                    mode = mode_input()
                    button = gr.Button("Generate", variant="primary", elem_id="generate")
                with gr.Column(scale=2):
                    image = gr.Image(
                        label="Digits", type="pil", format="png", height=320, elem_id="digits-image"
                    )
                    video = trajectory_output()
            events, report = report_outputs()

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


build, launch = entry_points(
    lambda model, device: ImageDemo(load_model(model, device)), "the embedded digits model"
)
