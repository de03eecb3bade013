"""``tpu-lab demo image``: text to image with the embedded Flux pipeline on the "tpu" device.

A Gradio Blocks app around :func:`tpu_lab.models.shapes.shapes_pipeline` (a ``FluxPipeline``).
Inputs: the prompt, the image size (a new size is a new shape for the transformer: compiled, it
recompiles, and the panel says why), denoising steps, seed, guidance (``true_cfg_scale`` against
the empty prompt), display scale, the mode (:data:`.shared.DEMO_MODES`): eager, TorchTPU's
``DEFER_AND_FUSE`` compile cache, or the transformer compiled the announcement's way
(``pipe.transformer.compile(backend="tpu", fullgraph=True, dynamic=False)``), and the chips: 1, or
4 (a simulated v6e-4 on the SPMD cluster, the transformer loaded with
``TensorParallelConfig(tp_degree=4)``: :class:`.shared.FourChips`). Outputs: the image, the
denoising trajectory as an H.264 video (1 chip), what the judge of the shapes world sees in the
image, and the request's compilations, recompilations (with their reasons), cache statistics and,
on 4 chips, what each chip held. Requests queue one at a time; the server listens on 127.0.0.1
unless told otherwise.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import DemoInputError, TpuLabError
from ..session import COMPILED
from . import entry_points
from .estimated import Call, engine_size, estimate_request
from .shared import (
    FPS,
    MAX_SEED,
    FourChips,
    check_chips,
    check_mode,
    chips_input,
    compiled_twin,
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

#: Image sizes offered (pixels per side; Flux needs multiples of 8 here: 2x2 patches of a
#: VAE with a factor of 4). The model was trained at 32.
SIZES = (32, 48, 64)
MAX_STEPS = 100
#: The guidance slider's range (true_cfg_scale; the default is shapes.GUIDANCE, 2): with the
#: shipped weights the judge passes 81 of 100 prompts at 1, 90 at 2, 84 at 3.
MAX_GUIDANCE = 4.0
MAX_SCALE = 16
EXAMPLE = "a large red circle in the top left on a black background"


@dataclass(frozen=True)
class PromptRequest:
    prompt: str
    size: int
    steps: int
    seed: int
    guidance: float
    scale: int
    mode: str
    chips: int = 1


def check_prompt_request(prompt, size, steps, seed, guidance, scale, mode, chips=1,
                         example=EXAMPLE) -> PromptRequest:  # fmt: skip
    """The inputs as a :class:`PromptRequest`, or a :class:`DemoInputError` naming the field
    (``example``: the prompt the message offers)."""
    mode = check_mode(mode)
    if not isinstance(prompt, str) or not prompt.strip():
        raise DemoInputError(f"Prompt must be some words, e.g. {example!r}; got {prompt!r}.")
    size = whole(size, "Size", min(SIZES), max(SIZES))
    if size not in SIZES:
        raise DemoInputError(f"Size must be one of {', '.join(map(str, SIZES))}; got {size}.")
    return PromptRequest(
        prompt=" ".join(prompt.split()),
        size=size,
        steps=whole(steps, "Steps", 1, MAX_STEPS),
        seed=whole(seed, "Seed", 0, MAX_SEED),
        guidance=real(guidance, "Guidance scale", 1.0, MAX_GUIDANCE),
        scale=whole(scale, "Display scale", 1, MAX_SCALE),
        mode=mode,
        chips=check_chips(chips),
    )


def judged(image, prompt: str, judge=None) -> str:
    """What the shapes world's judge (``judge``, by default ``shapes_world.judge``) says of
    ``image`` for ``prompt`` (one line)."""
    from ..models import shapes_world

    try:
        verdict = (judge or shapes_world.judge)(image, prompt)
    except ValueError:
        return "The judge only reads captions of the shapes world (see the examples)."
    if verdict:
        return "The judge: the prompt is honoured."
    return "The judge: " + "; ".join(verdict.failures) + "."


class PromptDemo:
    """One FluxPipeline (loaded from ``folder``), its compiled twin (made on first use), its
    4-chip twin on the cluster (started on first use), and the handler."""

    #: The model module (its ``tp_pipeline`` loads the 4-chip twin), the pipeline's output and
    #: the example prompt.
    MODEL, OUTPUT, EXAMPLE = "tpu_lab.models.shapes", "images", EXAMPLE

    def __init__(self, pipe, folder, *, title: str = "Text to image") -> None:
        self.pipe = pipe
        self.pipe.set_progress_bar_config(disable=True)
        self.title = title
        self._compiled = None
        self.four_chips = FourChips(self.MODEL, folder)
        self._videos = tempfile.TemporaryDirectory(prefix="tpu_lab_demo_")

    def close(self) -> None:
        self.four_chips.close()
        self._videos.cleanup()

    def pipeline(self, mode: str):
        """The pipeline for ``mode``: in compiled mode a twin sharing every component but the
        transformer, which is compiled in place the announcement's way."""
        if mode != COMPILED.value:
            return self.pipe
        if self._compiled is None:
            self._compiled = compiled_twin(self.pipe)
        return self._compiled

    def call_kwargs(self, request: PromptRequest) -> dict:
        """The pipeline's arguments for ``request`` (plain values: they also go to the chips),
        without the generator."""
        from ..models.shapes import TOKENS

        kwargs = {
            "prompt": request.prompt,
            "height": request.size,
            "width": request.size,
            "max_sequence_length": TOKENS,
            "num_inference_steps": request.steps,
            "output_type": "np",
        }
        if request.guidance > 1:
            kwargs.update(negative_prompt="", true_cfg_scale=request.guidance)
        return kwargs

    def generated(self, request: PromptRequest, callback=None):
        """``request`` run on its chips in its mode: (the pipeline's output, Report).
        ``callback`` (``callback_on_step_end``, given the latents) is called on 1 chip only."""
        import torch

        kwargs = self.call_kwargs(request)
        if request.chips > 1:
            output, report = self.four_chips.run(request.mode, kwargs, request.seed,
                                                 self.OUTPUT)  # fmt: skip
        else:
            pipe = self.pipeline(request.mode)
            kwargs["generator"] = torch.Generator("cpu").manual_seed(request.seed)
            if callback is not None:
                kwargs.update(callback_on_step_end=callback,
                              callback_on_step_end_tensor_inputs=["latents"])  # fmt: skip
            output, report = measured(request.mode,
                                      lambda: getattr(pipe(**kwargs), self.OUTPUT))  # fmt: skip
        report.estimate = self.estimated(request)
        return output, report

    #: What one request makes (the report's estimate is per one of them).
    UNIT = "image"

    def estimate_calls(self, request: PromptRequest) -> list[Call]:
        """What FluxPipeline runs for ``request``: both text encoders, the transformer once a
        step and the VAE's decode; with guidance (``true_cfg_scale`` against the empty prompt)
        it encodes both prompts and calls the transformer twice a step, on a batch of 1."""
        from ..models.shapes import TOKENS

        passes = 2 if request.guidance > 1 else 1
        size = engine_size(request.size, self.pipe.vae_scale_factor)
        return [
            Call("transformer", "transformer", request.steps * passes, 1, image_size=size,
                 text_tokens=TOKENS, split=True),
            Call("text encoder", "text_encoder", passes, 1, seq=self.pipe.tokenizer_max_length),
            Call("text encoder 2", "text_encoder_2", passes, 1, seq=TOKENS),
            Call("VAE decode", "vae", 1, 1, image_size=size),
        ]  # fmt: skip

    def estimated(self, request: PromptRequest):
        """The request's estimated TPU time (:func:`.estimated.estimate_request`)."""
        return estimate_request(self.pipe, self.estimate_calls(request), chips=request.chips,
                                mode=request.mode, items=1, unit=self.UNIT)  # fmt: skip

    def run(self, request: PromptRequest, on_step=None):
        """Draw ``request``: (image, MP4 bytes of the denoising trajectory (None on 4 chips),
        judge line, Report)."""
        from PIL import Image

        from ..media import Trajectory, encode_mp4

        trajectory = Trajectory(self.pipeline(request.mode)) if request.chips == 1 else None
        size = request.size

        def callback(p, step, t, tensors):
            # Flux hands over packed latents; the trajectory decodes (B, C, H, W) ones.
            latents = p._unpack_latents(tensors["latents"], size, size, p.vae_scale_factor)
            trajectory(p, step, t, {"latents": latents})
            if on_step is not None:
                on_step(step + 1, request.steps)
            return tensors

        images, report = self.generated(request, callback)
        image = (images[0] * 255).round().astype("uint8")
        picture = enlarge(Image.fromarray(image), request.scale)
        video = None
        if trajectory is not None:
            video = encode_mp4([enlarge(f, request.scale) for f in trajectory.frames()], fps=FPS)
        return picture, video, judged(image, request.prompt), report

    def generate(self, prompt, size, steps, seed, guidance, scale, mode, chips=1,
                 progress=None):  # fmt: skip
        """The Gradio handler: (image, video path, judge line, events HTML, report dict)."""
        import gradio as gr

        try:
            request = check_prompt_request(prompt, size, steps, seed, guidance, scale, mode,
                                           chips, self.EXAMPLE)  # fmt: skip
            on_step = (lambda i, n: progress((i, n), desc="denoising")) if progress else None
            image, video, verdict, report = self.run(request, on_step)
        except TpuLabError as exc:
            raise gr.Error(str(exc)) from exc
        return image, self.video_file(video), verdict, report_html(report), report.to_dict()

    def video_file(self, video: bytes | None) -> str | None:
        """``video`` (MP4 bytes) saved for Gradio to serve."""
        if video is None:
            return None
        path = Path(self._videos.name) / f"video-{time.time_ns()}.mp4"
        path.write_bytes(video)
        return str(path)

    #: What the inputs offer: example prompts, sizes, the guidance's label.
    EXAMPLES = (EXAMPLE, "a blue square left of a yellow triangle on a gray background",
                "a small white triangle in the centre on a black background")  # fmt: skip
    SIZES = SIZES
    GUIDANCE_LABEL = "Guidance (true_cfg_scale; 1 = none)"

    def heading(self) -> str:
        from ..models.shapes_world import COLOURS, SHAPES

        return (
            f"## {self.title}\nA tiny `FluxPipeline` trained on scenes of coloured shapes, on "
            f"the `tpu` device ({device_line()}). It knows {', '.join(COLOURS)}; "
            f"{', '.join(SHAPES)}; small/large; the four corners and the centre; "
            "*left of* and *above*; black or gray backgrounds. A new **Size** is a new "
            "shape for the transformer: compiled, that is a recompilation, shown below "
            "with its reason."
        )

    def defaults(self) -> tuple[int, float]:
        """The model's denoising steps and guidance."""
        from ..models.shapes import GUIDANCE, STEPS

        return STEPS, GUIDANCE

    def outputs(self) -> list:
        """The result's Gradio parts (the handler returns one value each, then the report's)."""
        import gradio as gr

        image = gr.Image(label="Image", type="pil", format="png", height=320,
                         elem_id="prompt-image")  # fmt: skip
        verdict = gr.Markdown(elem_id="verdict")
        return [image, trajectory_output(), verdict]

    def blocks(self):
        import gradio as gr

        steps_default, guidance_default = self.defaults()
        with gr.Blocks(title=f"tpu_lab: {self.title}") as demo:
            gr.Markdown(self.heading())
            with gr.Row():
                with gr.Column(scale=1):
                    prompt = gr.Textbox(self.EXAMPLES[0], label="Prompt", elem_id="prompt")
                    gr.Examples([[e] for e in self.EXAMPLES], [prompt])
                    inputs = [
                        prompt,
                        gr.Dropdown(list(self.SIZES), value=self.SIZES[0], label="Size (pixels)"),
                        gr.Number(steps_default, label=f"Steps (1-{MAX_STEPS})"),
                        gr.Number(0, label="Seed"),
                        gr.Slider(1, MAX_GUIDANCE, value=guidance_default, step=0.5,
                                  label=self.GUIDANCE_LABEL),
                        gr.Slider(1, MAX_SCALE, value=8, step=1, label="Display scale"),
                        mode_input(),
                        chips_input(),
                    ]  # fmt: skip
                    button = gr.Button("Generate", variant="primary", elem_id="generate")
                with gr.Column(scale=2):
                    outputs = self.outputs()
            events, report = report_outputs()

            def generate(prompt, size, steps, seed, guidance, scale, mode, chips,
                         progress=gr.Progress()):  # noqa: B008 (Gradio's way)
                return self.generate(prompt, size, steps, seed, guidance, scale, mode, chips,
                                     progress)  # fmt: skip

            button.click(generate, inputs, [*outputs, events, report], api_name="generate")
        demo.queue(default_concurrency_limit=1)
        return demo


def _prompt_demo(model, device: str) -> PromptDemo:
    from ..models.shapes import FOLDER, shapes_pipeline

    return PromptDemo(shapes_pipeline(device=device, path=model), model or FOLDER)


build, launch = entry_points(
    _prompt_demo, "the embedded shapes pipeline; else a FluxPipeline folder"
)
