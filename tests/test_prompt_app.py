"""``tpu-lab demo image``: the text-to-image app (the embedded FluxPipeline) served on 127.0.0.1,
called with gradio_client: prompt in, image, trajectory video and the judge's verdict out; in
compiled mode one compile, then a recompile with its reason when the size changes."""

from __future__ import annotations

import pytest

import tpu_lab  # noqa: F401  (the "tpu" device)

pytest.importorskip("gradio", reason="gradio is missing: pip install 'tpu-lab[demo]'")
pytest.importorskip("gradio_client", reason="gradio_client is missing: pip install 'tpu-lab[demo]'")
pytest.importorskip("av", reason="PyAV is missing: pip install 'tpu-lab[video]'")

from gradio_client.exceptions import AppError  # noqa: E402

from _browser import client_of, generate, served, video_frames  # noqa: E402
from tpu_lab.apps import prompt  # noqa: E402
from tpu_lab.cli import main  # noqa: E402
from tpu_lab.errors import DemoInputError  # noqa: E402
from tpu_lab.session import COMPILED, EAGER  # noqa: E402

#: What the events panel says of an eager request (the eager cache explained).
EAGER_NOTE = ("Eager: op by op, no graph of yours compiled. DEFER_NEVER: each op runs as its "
              "own small compiled program")

DEFAULTS = {"prompt": prompt.EXAMPLE, "size": 32, "steps": 6, "seed": 0, "guidance": 1,
            "scale": 4, "mode": EAGER.value, "chips": 1}  # fmt: skip


@pytest.fixture(scope="module")
def server():
    with served(prompt) as blocks:
        yield blocks


@pytest.fixture(scope="module")
def client(server):
    return client_of(server)


def _call(client, **changes):
    return generate(client, DEFAULTS, **changes)


def test_prompt_in_image_video_and_verdict_out(client):
    from PIL import Image

    picture, video, verdict, html, report = _call(client, steps=5, scale=4)
    with Image.open(picture) as im:
        assert im.size == (32 * 4, 32 * 4)
    count, size, _ = video_frames(video)
    assert count == 5 and size[0] > 0  # one frame per step
    assert verdict.startswith("The judge: ")
    assert report["mode"] == "eager" and EAGER_NOTE in html


def test_compiled_mode_compiles_once_per_size_and_explains_the_recompile(client):
    _, _, _, _, first = _call(client, mode=COMPILED.value)
    assert [e["kind"] for e in first["events"]] == ["compile"]
    _, _, _, _, again = _call(client, mode=COMPILED.value, seed=3)
    assert again["events"] == []
    _, _, _, html, resized = _call(client, mode=COMPILED.value, size=48)
    assert [e["kind"] for e in resized["events"]] == ["recompile"]
    summary = resized["events"][0]["summary"]
    assert "changed from 16 to 36" in summary, summary  # 4x4 -> 6x6 tokens
    assert "changed from 16 to 36" in html


def test_four_chips_give_the_one_chip_image_and_say_what_each_held(client):
    import numpy as np
    from PIL import Image

    one, *_ = _call(client, steps=3)
    four, video, _, html, report = _call(client, steps=3, chips=4)
    assert video is None  # the trajectory is drawn on 1 chip only
    held = report["chips"]["transformer"]
    assert len(held) == 4 and len(set(held)) == 1
    assert "On 4 chips (v6e-4, tensor parallel): each chip held transformer:" in html
    assert report["estimate"]["chips"] == 4
    assert "(not a measurement), on 4 chips, tensor parallel, eager: transformer " in html
    with Image.open(one) as a, Image.open(four) as b:
        diff = np.abs(np.asarray(a).astype(int) - np.asarray(b).astype(int))
    assert diff.max() <= 1  # float32 TP=4 vs TP=1, then rounded to 8 bits


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"prompt": "  "}, f"Prompt must be some words, e.g. {prompt.EXAMPLE!r}; got '  '."),
        ({"steps": 0}, "Steps must be a whole number from 1 to 100; got 0."),
        ({"guidance": 9}, "Value 9 is greater than maximum value 4.0."),  # Gradio's slider
    ],
)  # fmt: skip
def test_bad_input_is_answered_with_the_message(client, changes, message):
    with pytest.raises(AppError) as info:
        _call(client, **changes)
    assert str(info.value) == message


def test_size_and_guidance_must_be_offered():
    with pytest.raises(DemoInputError) as info:
        prompt.check_prompt_request("a red circle", 40, 4, 0, 1, 4, EAGER.value)
    assert str(info.value) == "Size must be one of 32, 48, 64; got 40."
    with pytest.raises(DemoInputError) as info:
        prompt.check_prompt_request("a red circle", 32, 4, 0, 9, 4, EAGER.value)
    assert str(info.value) == "Guidance scale must be a number from 1 to 4; got 9."


def test_the_verdict_names_what_is_missing():
    import numpy as np

    black = np.zeros((32, 32, 3), np.uint8)
    assert prompt.judged(black, prompt.EXAMPLE) == "The judge: no red object."
    assert prompt.judged(black, "a cat").startswith("The judge only reads captions")


def test_cli_serves_prompts_as_the_image_demo(tmp_path, capsys):
    assert main(["demo", "image", "--model", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tpu-lab demo image: ") and "no model_index.json" in err


def _parts(pipe, size, steps, passes, chips, mode):
    """The request's parts, each estimated directly from its component's config."""
    from tpu_lab.apps.estimated import generation_of
    from tpu_lab.models.shapes import TOKENS
    from tpu_lab.sharding import plan

    latent = (size // 4 * 8,) * 2  # the engine's 8x VAE; the shapes VAE scales by 4
    gen = generation_of(chips)
    flux = {"_class_name": "FluxTransformer2DModel", **pipe.transformer.config}
    vae = {"_class_name": "AutoencoderKL", **pipe.vae.config}
    return [
        ("transformer", steps * passes, plan(flux, chips=chips, generation=gen, image_size=latent)
         .estimate("forward", mode=mode, text_tokens=TOKENS)),
        ("text encoder", passes, plan(pipe.text_encoder.config, chips=1, generation=gen, batch=1,
                                      seq=pipe.tokenizer_max_length).estimate("forward", mode=mode)),
        ("text encoder 2", passes, plan(pipe.text_encoder_2.config, chips=1, generation=gen,
                                        batch=1, seq=TOKENS).estimate("forward", mode=mode)),
        ("VAE decode", 1, plan(vae, chips=1, generation=gen, image_size=latent)
         .estimate("forward", mode=mode)),
    ]  # fmt: skip


def test_the_report_estimates_each_part_of_the_request(client, server):
    from tpu_lab.views.estimate import seconds_text

    *_, html, report = _call(client, size=48, steps=3, guidance=2)
    parts = _parts(server.demo.pipe, 48, 3, 2, 1, "eager")  # true CFG: 2 transformer calls a step
    estimate = report["estimate"]
    assert [(p["part"], p["calls"], p["seconds"]) for p in estimate["parts"]] == [
        (name, calls, calls * e.seconds) for name, calls, e in parts]
    total = sum(calls * e.seconds for _, calls, e in parts)
    assert estimate["seconds"] == estimate["seconds_per_image"] == total
    label = "estimated on an idealised TPU v6e (not a measurement)"
    assert estimate["label"] == label
    expected = sum(calls * e.expected_seconds for _, calls, e in parts)
    assert (f"TPU time: expected about {seconds_text(expected)} per image (idealised bound "
            f"{seconds_text(total)}), {label}, on 1 chip, eager: ") in html
    assert "+ VAE decode " in html and "(1 x AutoencoderKL, " in html


def test_the_four_chip_estimate_splits_the_transformer_only(server):
    request = prompt.check_prompt_request(prompt.EXAMPLE, 32, 4, 0, 1, 4, COMPILED.value, 4)
    estimate = server.demo.estimated(request)
    one = _parts(server.demo.pipe, 32, 4, 1, 1, "compiled")
    four = _parts(server.demo.pipe, 32, 4, 1, 4, "compiled")
    assert estimate.chips == 4 and estimate.generation == "v6e"
    assert [p.seconds for p in estimate.parts] == [calls * e.seconds for _, calls, e in four]
    assert four[0][2].chips == 4 and four[0][2].seconds != one[0][2].seconds
    assert [e.seconds for *_, e in four[1:]] == [e.seconds for *_, e in one[1:]]
    assert "on 4 chips, tensor parallel, compiled: transformer " in estimate.text()
