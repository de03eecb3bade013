"""``tpu-lab demo text``: continue a prompt with the embedded character model on the "tpu" device.

A Gradio Blocks app. Inputs: the prompt, how many characters to add, the temperature (0 is
greedy: the most likely character every time), the seed of the sampling, and the mode
(:data:`.shared.DEMO_MODES`: eager, TorchTPU's ``DEFER_AND_FUSE`` compile cache, or the model
under ``torch.compile(backend="tpu", fullgraph=True, dynamic=False)``). Every new character runs the
model on one fixed window of ``CONTEXT`` tokens (the text so far, right-padded), so the
compiled model sees a single shape: it compiles on the first compiled request and every later
token, and request, reuses that graph. Outputs: the text, and the request's compilations,
recompilations and cache statistics from :mod:`tpu_lab.events`. Requests queue one at a time;
the server listens on 127.0.0.1 unless told otherwise and makes no share link unless asked.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import DemoInputError, TpuLabError
from ..session import COMPILED
from . import entry_points
from .shared import (
    MAX_SEED,
    Report,
    check_mode,
    device_line,
    measured,
    mode_input,
    real,
    report_html,
    report_outputs,
    whole,
)

__all__ = ["Request", "TextDemo", "build", "check_request", "launch", "load_model"]

#: Allowed ranges of the inputs (inclusive).
MAX_NEW_TOKENS = 400
MAX_PROMPT = 2000
MAX_TEMPERATURE = 2.0


@dataclass(frozen=True)
class Request:
    """One validated request."""

    prompt: str
    max_new_tokens: int
    temperature: float
    seed: int
    mode: str


def check_request(prompt, max_new_tokens, temperature, seed, mode) -> Request:
    """The inputs as a :class:`Request`, or a :class:`DemoInputError` saying what to change."""
    mode = check_mode(mode)
    if not isinstance(prompt, str) or not prompt:
        raise DemoInputError("Prompt is empty: type a few characters for the model to continue.")
    if len(prompt) > MAX_PROMPT:
        raise DemoInputError(
            f"Prompt has {len(prompt)} characters; use at most {MAX_PROMPT} (the model reads "
            "only the last 128 anyway)."
        )
    return Request(
        prompt=prompt,
        max_new_tokens=whole(max_new_tokens, "Characters", 1, MAX_NEW_TOKENS),
        temperature=real(temperature, "Temperature", 0.0, MAX_TEMPERATURE),
        seed=whole(seed, "Seed", 0, MAX_SEED),
        mode=mode,
    )


def load_model(path: str | Path | None = None, device: str = "tpu"):
    """The embedded character model and tokenizer, or those of the folder at ``path`` (one
    written by ``scripts/train_chars.py``: ``config.json``, weights and ``vocab.json``)."""
    from ..models.chars import chars_model

    return chars_model(device=device, path=None if path is None else Path(path).expanduser())


class TextDemo:
    """The app's state: the model, its tokenizer, its compiled twin (made on first use), and
    the handler :meth:`generate`."""

    def __init__(self, model, tokenizer, *, title: str = "Continue a text") -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.title = title
        self._compiled = None

    def close(self) -> None:
        self._compiled = None

    def runner(self, mode: str):
        """The model for ``mode``: the compiled one is
        ``torch.compile(model, backend="tpu", fullgraph=True, dynamic=False)``."""
        if mode != COMPILED.value:
            return self.model
        if self._compiled is None:
            import torch

            self._compiled = torch.compile(self.model, backend="tpu", fullgraph=True, dynamic=False)
        return self._compiled

    def run(self, request: Request) -> tuple[str, Report]:
        """Continue ``request.prompt``: (the new text, :class:`Report`)."""
        import torch

        from ..models.chars import generate

        ids = self.tokenizer.encode(request.prompt)
        model = self.runner(request.mode)
        kwargs = {
            "temperature": request.temperature,
            "generator": torch.Generator("cpu").manual_seed(request.seed),
            "device": self.model.device,
        }
        new, report = measured(
            request.mode, lambda: generate(model, ids, request.max_new_tokens, **kwargs)
        )
        return self.tokenizer.decode(new), report

    def generate(self, prompt, max_new_tokens, temperature, seed, mode):
        """The Gradio handler: (prompt and continuation, events HTML, report dict)."""
        import gradio as gr

        try:
            request = check_request(prompt, max_new_tokens, temperature, seed, mode)
            text, report = self.run(request)
        except TpuLabError as exc:
            raise gr.Error(str(exc)) from exc
        return request.prompt + text, report_html(report), report.to_dict()

    def blocks(self):
        """The Gradio Blocks of the app."""
        import gradio as gr

        with gr.Blocks(title=f"tpu_lab: {self.title}") as demo:
            gr.Markdown(
                f"## {self.title}\nThe embedded character-level model (trained on the Zen of "
                f"Python and standard-library docstrings) on the `tpu` device "
                f"({device_line()}). Every character runs the model on one fixed window, so "
                "in compiled mode the first request compiles and later ones reuse the graph."
            )
            with gr.Row():
                with gr.Column(scale=1):
                    prompt = gr.Textbox("Beautiful is", lines=3, label="Prompt", elem_id="prompt")
                    # Typed numbers are checked by the handler, which names the field.
                    count = gr.Number(80, label=f"Characters (1-{MAX_NEW_TOKENS})")
                    temperature = gr.Slider(
                        0, MAX_TEMPERATURE, value=0, step=0.1, label="Temperature (0 = greedy)"
                    )
                    seed = gr.Number(0, label="Seed (sampling)")
                    mode = mode_input()
                    button = gr.Button("Generate", variant="primary", elem_id="generate")
                with gr.Column(scale=2):
                    output = gr.Textbox(label="Text", lines=10, elem_id="text")
            events, report = report_outputs()
            button.click(
                self.generate,
                [prompt, count, temperature, seed, mode],
                [output, events, report],
                api_name="generate",
            )
        demo.queue(default_concurrency_limit=1)
        return demo


build, launch = entry_points(
    lambda model, device: TextDemo(*load_model(model, device)), "the embedded character model"
)
