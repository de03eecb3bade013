"""``tpu-lab demo video``: text to video with the embedded Latte pipeline on the "tpu" device.

The image demo (:mod:`.prompt`) for :func:`tpu_lab.models.clips.clips_pipeline` (a
``LattePipeline``): the same inputs (prompt, size, steps, seed, guidance as ``guidance_scale``
against the empty prompt, display scale, mode, chips; on 4 chips the transformer is loaded as
``clips.LatteTransformerTP`` with its user-defined plan), and out come the clip, played as an
H.264 video, what the judge of the shapes world sees in it (colour, shape, background, motion)
and the request's compilations, recompilations (with their reasons), cache statistics and, on 4
chips, what each chip held.
"""

from __future__ import annotations

from . import entry_points
from .estimated import Call, engine_size
from .prompt import SIZES, PromptDemo, PromptRequest, judged
from .shared import FPS, device_line, enlarge

#: The clip's frame rate (16 frames: 2 s).
CLIP_FPS = FPS
EXAMPLE = "a large red circle moving right on a black background"


def judged_clip(frames, prompt: str) -> str:
    """What the shapes world's judge says of the clip ``frames`` for ``prompt`` (one line)."""
    from ..models import shapes_world

    return judged(frames, prompt, shapes_world.judge_clip)


class VideoDemo(PromptDemo):
    """One LattePipeline, its compiled twin, its 4-chip twin, and the handler."""

    MODEL, OUTPUT, EXAMPLE = "tpu_lab.models.clips", "frames", EXAMPLE

    def __init__(self, pipe, folder, *, title: str = "Text to video") -> None:
        super().__init__(pipe, folder, title=title)

    def call_kwargs(self, request: PromptRequest) -> dict:
        from ..models.clips import CALL

        return {
            **CALL,
            "prompt": request.prompt,
            "negative_prompt": "",
            "height": request.size,
            "width": request.size,
            "num_inference_steps": request.steps,
            "guidance_scale": request.guidance,
            "output_type": "np",
        }

    UNIT = "clip"

    def estimate_calls(self, request: PromptRequest) -> list[Call]:
        """What LattePipeline runs for ``request``: its T5 encoder (120 tokens, the pipeline's
        fixed length), the transformer once a step on all the clip's frames and the VAE's decode
        of every frame at once; with guidance it encodes both prompts and runs the transformer
        on a batch of 2."""
        from ..models.clips import FRAMES, TP_PLAN
        from ..sharding.step_inputs import TEXT_TOKENS

        passes = 2 if request.guidance > 1 else 1
        size = engine_size(request.size, self.pipe.vae_scale_factor)
        tokens = TEXT_TOKENS["LatteTransformer3DModel"]
        return [
            Call("transformer", "transformer", request.steps, passes, image_size=size,
                 frames=FRAMES, text_tokens=tokens, split=True, tp_plan=TP_PLAN),
            Call("text encoder", "text_encoder", passes, 1, seq=tokens),
            Call("VAE decode", "vae", 1, FRAMES, image_size=size),
        ]  # fmt: skip

    def run(self, request: PromptRequest, on_step=None):
        """Animate ``request``: (first frame, MP4 bytes of the clip, judge line, Report)."""
        from PIL import Image

        from ..media import encode_mp4

        def callback(p, step, t, tensors):
            if on_step is not None:
                on_step(step + 1, request.steps)
            return tensors

        videos, report = self.generated(request, callback)
        frames = (videos[0] * 255).round().astype("uint8")
        shown = [enlarge(Image.fromarray(f), request.scale) for f in frames]
        verdict = judged_clip(frames, request.prompt)
        return shown[0], encode_mp4(shown, fps=CLIP_FPS), verdict, report

    def generate(self, prompt, size, steps, seed, guidance, scale, mode, chips=1, progress=None):
        """The Gradio handler: (video path, judge line, events HTML, report dict)."""
        _, video, verdict, html, report = super().generate(
            prompt, size, steps, seed, guidance, scale, mode, chips, progress
        )
        return video, verdict, html, report

    EXAMPLES = (EXAMPLE, "a blue square growing on a gray background",
                "a small yellow triangle turning into cyan on a black background")  # fmt: skip
    SIZES = SIZES[:2]
    GUIDANCE_LABEL = "Guidance (guidance_scale; 1 = none)"

    def heading(self) -> str:
        from ..models.shapes_world import COLOURS, MOTIONS, SHAPES

        return (
            f"## {self.title}\nA tiny `LattePipeline` trained on clips of a coloured shape in "
            f"motion, on the `tpu` device ({device_line()}). It knows {', '.join(COLOURS)}; "
            f"{', '.join(SHAPES)}; small/large; {', '.join(MOTIONS)} (*turning into* another "
            "colour); black or gray backgrounds. A new **Size** is a new shape for the "
            "transformer: compiled, that is a recompilation, shown below with its reason. "
            "**Chips** 4 loads the transformer with its own tensor-parallel plan (Diffusers "
            "has none for Latte)."
        )

    def defaults(self) -> tuple[int, float]:
        from ..models.clips import GUIDANCE, STEPS

        return STEPS, GUIDANCE

    def outputs(self) -> list:
        import gradio as gr

        clip = gr.Video(label="Clip", elem_id="clip", autoplay=True, loop=True, height=320)
        return [clip, gr.Markdown(elem_id="verdict")]


def _video_demo(model, device: str) -> VideoDemo:
    from ..models.clips import FOLDER, clips_pipeline

    return VideoDemo(clips_pipeline(device=device, path=model), model or FOLDER)


build, launch = entry_points(_video_demo, "the embedded shapes video pipeline; else a "
                             "LattePipeline folder")  # fmt: skip
