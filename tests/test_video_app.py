"""``tpu-lab demo video``: the text-to-video app (the embedded LattePipeline) served on 127.0.0.1,
called with gradio_client: prompt in, the clip (an H.264 video of 16 frames) and the judge's
verdict out; in compiled mode one compile, then a recompile with its reason when the size
changes; on 4 chips the transformer split by its user-defined plan, and what each chip held."""

from __future__ import annotations

import pytest

import tpu_lab  # noqa: F401  (the "tpu" device)

pytest.importorskip("gradio", reason="gradio is missing: pip install 'tpu-lab[demo]'")
pytest.importorskip("gradio_client", reason="gradio_client is missing: pip install 'tpu-lab[demo]'")
av = pytest.importorskip("av", reason="PyAV is missing: pip install 'tpu-lab[video]'")

from gradio_client.exceptions import AppError  # noqa: E402

from _browser import client_of, generate, served, video_frames  # noqa: E402
from tpu_lab.apps import video  # noqa: E402
from tpu_lab.cli import main  # noqa: E402
from tpu_lab.models import clips  # noqa: E402
from tpu_lab.session import COMPILED, EAGER  # noqa: E402

#: What the events panel says of an eager request (the eager cache explained).
EAGER_NOTE = ("Eager: op by op, no graph of yours compiled. DEFER_NEVER: each op runs as its "
              "own small compiled program")

DEFAULTS = {"prompt": video.EXAMPLE, "size": 32, "steps": 4, "seed": 0, "guidance": 1,
            "scale": 4, "mode": EAGER.value, "chips": 1}  # fmt: skip


@pytest.fixture(scope="module")
def server():
    with served(video) as blocks:
        yield blocks


@pytest.fixture(scope="module")
def client(server):
    return client_of(server)


def _call(client, **changes):
    return generate(client, DEFAULTS, **changes)


def test_prompt_in_clip_and_verdict_out(client):
    clip, verdict, html, report = _call(client)
    assert video_frames(clip) == (clips.FRAMES, (32 * 4, 32 * 4), "h264")
    assert verdict.startswith("The judge: ")
    assert report["mode"] == "eager" and EAGER_NOTE in html


def test_compiled_mode_compiles_once_per_size_and_explains_the_recompile(client):
    *_, first = _call(client, mode=COMPILED.value)
    assert [e["kind"] for e in first["events"]] == ["compile"]
    *_, again = _call(client, mode=COMPILED.value, seed=3)
    assert again["events"] == []
    _, _, html, resized = _call(client, mode=COMPILED.value, size=48)
    assert [e["kind"] for e in resized["events"]] == ["recompile"]
    assert "changed from 8 to 12" in resized["events"][0]["summary"]  # latent pixels per side
    assert "changed from 8 to 12" in html


def test_four_chips_split_the_feed_forwards_and_give_the_one_chip_clip(client):
    import numpy as np

    def pixels(path):
        with av.open(path if isinstance(path, str) else path["video"]) as container:
            return np.stack([f.to_ndarray(format="rgb24")
                             for f in container.decode(container.streams.video[0])])  # fmt: skip

    one, *_ = _call(client, steps=2)
    four, _, html, report = _call(client, steps=2, chips=4)
    held = report["chips"]["transformer"]
    assert len(held) == 4 and len(set(held)) == 1
    assert "On 4 chips (v6e-4, tensor parallel): each chip held transformer:" in html
    # the same clip up to H.264: frames equal to float32 rounding can still round a pixel to
    # the next uint8 level, and the encoder then codes a block a little differently
    apart = np.abs(pixels(one).astype(int) - pixels(four).astype(int))
    print(f"1 chip against 4, decoded: max {apart.max()}, mean {apart.mean():.4f}, "
          f"over 2: {(apart > 2).mean():.4%}")
    assert apart.max() <= 8 and (apart > 2).mean() < 0.001


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"prompt": ""}, f"Prompt must be some words, e.g. {video.EXAMPLE!r}; got ''."),
        ({"size": 64}, "is not in the list of choices: [32, 48]"),  # Gradio's dropdown
        ({"chips": 2}, "is not in the list of choices: [1, 4]"),  # Gradio's radio
    ],
)  # fmt: skip
def test_bad_input_is_answered_with_the_message(client, changes, message):
    with pytest.raises(AppError) as info:
        _call(client, **changes)
    assert message in str(info.value)


def test_the_verdict_names_what_is_missing():
    import numpy as np

    black = np.zeros((clips.FRAMES, 32, 32, 3), np.uint8)
    assert video.judged_clip(black, video.EXAMPLE) == "The judge: no red object at the start."
    assert video.judged_clip(black, "a cat").startswith("The judge only reads captions")


def test_cli_serves_the_video_demo(tmp_path, capsys):
    assert main(["demo", "video", "--model", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tpu-lab demo video: ") and "no model_index.json" in err


def test_the_report_estimates_each_part_of_the_clip(client, server):
    from tpu_lab.sharding import plan
    from tpu_lab.sharding.step_inputs import TEXT_TOKENS
    from tpu_lab.views.estimate import seconds_text

    *_, html, report = _call(client, steps=3, guidance=3)
    pipe = server.demo.pipe
    latent = (32 // 4 * 8,) * 2  # the engine's 8x VAE; the shapes VAE scales by 4
    tokens = TEXT_TOKENS["LatteTransformer3DModel"]  # LattePipeline's fixed prompt length
    latte = {"_class_name": "LatteTransformer3DModel", **pipe.transformer.config}
    vae = {"_class_name": "AutoencoderKL", **pipe.vae.config}
    parts = [
        ("transformer", 3, plan(latte, chips=1, batch=2, image_size=latent, frames=clips.FRAMES)
         .estimate("forward", mode="eager", text_tokens=tokens)),  # CFG: a batch of 2
        ("text encoder", 2, plan(pipe.text_encoder.config, chips=1, batch=1, seq=tokens)
         .estimate("forward", mode="eager")),
        ("VAE decode", 1, plan(vae, chips=1, batch=clips.FRAMES, image_size=latent)
         .estimate("forward", mode="eager")),  # every frame in one decode
    ]  # fmt: skip
    estimate = report["estimate"]
    assert [(p["part"], p["calls"], p["seconds"]) for p in estimate["parts"]] == [
        (name, calls, calls * e.seconds) for name, calls, e in parts]
    total = sum(calls * e.seconds for _, calls, e in parts)
    assert estimate["seconds_per_clip"] == total
    expected = sum(calls * e.expected_seconds for _, calls, e in parts)
    assert (f"TPU time: expected about {seconds_text(expected)} per clip (idealised bound "
            f"{seconds_text(total)}), estimated on an idealised TPU v6e (not a measurement), on "
            "1 chip, eager: transformer ") in html
