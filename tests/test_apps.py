"""``tpu-lab demo digits``: the Gradio app served on 127.0.0.1 and called with gradio_client.

One server for the module (a free port on 127.0.0.1, closed in ``finally``). Requests return
the image, the trajectory video (H.264, decoded here to the right frame count and size) and
the request's events; in compiled mode the first request compiles the UNet and a new batch size
recompiles it, with the reason. Bad inputs come back as the app's message. Compiled graphs run
the ATen graph (the ``aten`` lowering): compiling with Inductor takes much longer.
"""

from __future__ import annotations

import pytest

import tpu_lab  # noqa: F401  (the "tpu" device)

pytest.importorskip("gradio", reason="gradio is missing: pip install 'tpu-lab[demo]'")
pytest.importorskip("gradio_client", reason="gradio_client is missing: pip install 'tpu-lab[demo]'")
pytest.importorskip("av", reason="PyAV is missing: pip install 'tpu-lab[video]'")

from gradio_client.exceptions import AppError  # noqa: E402

from _browser import client_of, generate, served, video_frames  # noqa: E402
from tpu_lab.apps import image as app  # noqa: E402
from tpu_lab.cli import main  # noqa: E402
from tpu_lab.errors import DemoInputError  # noqa: E402
from tpu_lab.session import COMPILED, EAGER, FUSE  # noqa: E402

#: What the events panel says of an eager request (the eager cache explained).
EAGER_NOTE = ("Eager: op by op, no graph of yours compiled. DEFER_NEVER: each op runs as its "
              "own small compiled program")

DEFAULTS = {"label": 7, "count": 2, "steps": 6, "seed": 0, "guidance": 1, "scale": 8,
            "mode": EAGER.value}  # fmt: skip



@pytest.fixture(scope="module")
def server():
    with served(app) as blocks:
        yield blocks


@pytest.fixture(scope="module")
def client(server):
    return client_of(server)


def _call(client, **changes):
    return generate(client, DEFAULTS, **changes)


def test_binds_localhost_without_share_link(server):
    assert server.server_name == "127.0.0.1"
    assert server.local_url.startswith("http://127.0.0.1:")
    assert server.share_url is None


def test_generate_returns_image_video_and_events(client):
    from PIL import Image

    image, video, html, report = _call(client, count=3, steps=5, scale=8)
    assert image.endswith(".png")  # lossless: the pixels as drawn
    with Image.open(image) as picture:
        assert picture.size == ((3 * 8 + 4 * 2) * 8, (8 + 2 * 2) * 8)  # 2 pixels apart
    count, size, codec = video_frames(video)
    assert codec == "h264" and count == 5  # one frame per step
    assert size[0] % 2 == 0 and size[1] % 2 == 0 and size[0] > size[1]
    assert report["mode"] == "eager" and report["counts"]["sync"] >= 5
    assert EAGER_NOTE in html


def test_compiled_mode_shows_compile_then_recompile_with_reason(client):
    _, _, html, first = _call(client, mode=COMPILED.value, count=2)
    assert [e["kind"] for e in first["events"]] == ["compile"]
    assert first["events"][0]["summary"].startswith("compiled forward in")
    _, _, _, again = _call(client, mode=COMPILED.value, count=2, seed=5)
    assert again["events"] == [] and "compile" not in again["counts"]
    _, _, html, resized = _call(client, mode=COMPILED.value, count=3)
    assert [e["kind"] for e in resized["events"]] == ["recompile"]
    event = resized["events"][0]
    assert event["summary"] == "recompiled forward: argument sample: dimension 0 changed from 2 to 3"
    assert "size mismatch at index 0. expected 2, actual 3" in event["reason"]
    assert "dimension 0 changed from 2 to 3" in html


def test_defer_and_fuse_reports_cache_statistics(client):
    _call(client, mode=FUSE.value)
    _, _, html, report = _call(client, mode=FUSE.value)
    cache = report["cache"]
    assert cache["requests"] == cache["hits"] + cache["misses"] > 0
    assert cache["hits"] > 0
    assert f"requests {cache['requests']}" in html


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"steps": 0}, "Steps must be a whole number from 1 to 200; got 0."),
        ({"count": 2.5}, "Images must be a whole number from 1 to 16; got 2.5."),
        ({"count": 17}, "Images must be a whole number from 1 to 16; got 17."),
        ({"seed": -1}, "Seed must be a whole number from 0 to 4294967295; got -1."),
    ],
)  # fmt: skip
def test_bad_input_is_answered_with_the_message(client, changes, message):
    with pytest.raises(AppError) as info:
        _call(client, **changes)
    assert str(info.value) == message


def test_gradio_checks_the_choices(client):
    with pytest.raises(AppError, match=r"Value: 12 is not in the list of choices"):
        _call(client, label=12)


def test_check_request_names_the_field():
    with pytest.raises(DemoInputError) as info:
        app.check_request(3, 1, 32, 0, 40, 8, EAGER.value)
    assert str(info.value) == "Guidance scale must be a number from 1 to 2; got 40."
    with pytest.raises(DemoInputError) as info:
        app.check_request(3, 1, 32, 0, 1, 8, "fast")
    assert str(info.value) == "mode must be one of eager, fuse, compiled; got 'fast'."


def test_check_request_accepts_what_the_widgets_send():
    request = app.check_request("7", 4.0, 32, 0, 1, 16, COMPILED.value)
    assert request == app.Request(7, 4, 32, 0, 1.0, 16, COMPILED.value)


def test_model_path_must_be_a_pipeline_folder(tmp_path):
    with pytest.raises(tpu_lab.TpuLabError, match="no model_index.json there"):
        app.load_model(tmp_path)


def test_model_path_loads_a_trained_digits_folder(tmp_path):
    from tpu_lab.models.digits import digits_pipeline

    digits_pipeline(device="cpu").save_pretrained(tmp_path)
    pipe = app.load_model(tmp_path)
    assert type(pipe).__name__ == "DigitsPipeline"


def test_model_path_rejects_pipelines_without_classes(tmp_path):
    from diffusers import DDPMPipeline, DDPMScheduler, UNet2DModel

    unet = UNet2DModel(sample_size=8, in_channels=1, out_channels=1, layers_per_block=1,
                       block_out_channels=(8, 8), norm_num_groups=4,
                       down_block_types=("DownBlock2D", "DownBlock2D"),
                       up_block_types=("UpBlock2D", "UpBlock2D"))  # fmt: skip
    DDPMPipeline(unet=unet, scheduler=DDPMScheduler()).save_pretrained(tmp_path)
    with pytest.raises(tpu_lab.TpuLabError) as info:
        app.load_model(tmp_path)
    assert str(info.value) == (
        f"--model {tmp_path}: DDPMPipeline takes no class_labels or callback_on_step_end; the "
        "image demo draws with class-conditional pipelines that report their steps "
        "(DigitsPipeline)."
    )


def test_cli_reports_a_bad_model_path(tmp_path, capsys):
    assert main(["demo", "digits", "--model", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tpu-lab demo digits: --model ")
    assert "no model_index.json there" in err


def test_the_report_estimates_the_tpu_time_of_the_request(client, server):
    from tpu_lab.session import current_topology
    from tpu_lab.sharding import plan
    from tpu_lab.views.estimate import seconds_text

    _, _, html, report = _call(client, count=3, steps=5, guidance=1.5)
    unet = server.demo.pipe.unet
    generation = current_topology()[0]
    step = plan({"_class_name": "UNet2DModel", **unet.config}, chips=1, generation=generation,
                batch=6, image_size=(8, 8)).estimate("forward", mode="eager")  # CFG: 2 x 3
    estimate = report["estimate"]
    assert estimate["parts"] == [{"part": "UNet", "model": "UNet2DModel", "calls": 5,
                                  "seconds": 5 * step.seconds,
                                  "expected_seconds": 5 * step.expected_seconds,
                                  "bound": step.bound}]
    assert estimate["seconds"] == 5 * step.seconds
    assert estimate["seconds_per_image"] == 5 * step.seconds / 3
    label = f"estimated on an idealised TPU {generation} (not a measurement)"
    assert estimate["label"] == label and estimate["mode"] == "eager"
    assert (f"TPU time: expected about {seconds_text(5 * step.expected_seconds / 3)} per image "
            f"(idealised bound {seconds_text(5 * step.seconds / 3)}), {label}, on 1 chip, "
            f"eager: UNet {seconds_text(5 * step.expected_seconds)} (5 x UNet2DModel, "
            f"{step.bound}-bound)") in html
    *_, unguided = _call(client, count=3, steps=5, guidance=1, mode=COMPILED.value)
    step = plan({"_class_name": "UNet2DModel", **unet.config}, chips=1, generation=generation,
                batch=3, image_size=(8, 8)).estimate("forward", mode="compiled")
    assert unguided["estimate"]["seconds"] == 5 * step.seconds
