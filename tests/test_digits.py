"""The embedded digits model: loads offline through ``from_pretrained``, draws digits that a
classifier trained on the real digits recognises, runs on the "tpu" device as on the CPU, and
rejects bad input with a message saying what to pass.

The grid of generated digits is kept as tests/artifacts/digits_grid.png (look at it).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

import tpu_lab  # noqa: F401  (the "tpu" device)

pytest.importorskip("diffusers", reason="diffusers is missing: pip install 'tpu-lab[hf]'")
sklearn = pytest.importorskip("sklearn", reason="scikit-learn is missing: pip install 'tpu-lab[dev]'")

from diffusers import DDIMScheduler, UNet2DModel  # noqa: E402

from tpu_lab.models import digits_pipeline  # noqa: E402
from tpu_lab.models.digits import (  # noqa: E402
    FOLDER,
    UNET_CONFIG,
    DigitsInputError,
    DigitsPipeline,
)

ARTIFACTS = Path(__file__).parent / "artifacts"
#: The figure the README reports: the share of 100 samples (10 per class, 32 DDIM steps,
#: seed 0) that an SVM trained on all of load_digits puts in the requested class, without
#: guidance and at the default guidance (measured with the shipped weights: 0.98 and 0.99).
MIN_ACCURACY = 0.80


@pytest.fixture(scope="module")
def pipe():
    p = digits_pipeline()
    p.set_progress_bar_config(disable=True)
    return p


@pytest.fixture(scope="module")
def classifier():
    from sklearn.datasets import load_digits
    from sklearn.svm import SVC

    digits = load_digits()
    return SVC(gamma=0.001, C=10).fit(digits.data, digits.target)


def _seed(n: int = 0) -> torch.Generator:
    return torch.Generator("cpu").manual_seed(n)


def test_shipped_folder_is_a_small_diffusers_pipeline():
    index = json.loads((FOLDER / "model_index.json").read_text())
    assert index["_class_name"] == "DigitsPipeline"
    assert index["unet"] == ["diffusers", "UNet2DModel"]
    assert index["scheduler"] == ["diffusers", "DDIMScheduler"]
    weights = FOLDER / "unet" / "diffusion_pytorch_model.safetensors"
    assert weights.stat().st_size < 4 * 2**20


def test_loads_offline_through_from_pretrained(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    pipe = DigitsPipeline.from_pretrained(FOLDER)
    assert isinstance(pipe.unet, UNet2DModel)
    assert isinstance(pipe.scheduler, DDIMScheduler)
    for key, value in UNET_CONFIG.items():
        expected = list(value) if isinstance(value, tuple) else value
        got = pipe.unet.config[key]
        assert (list(got) if isinstance(got, tuple) else got) == expected, key
    on_tpu = digits_pipeline()
    assert {p.device for p in on_tpu.unet.parameters()} == {torch.device("tpu", 0)}


@pytest.mark.parametrize("guidance", [1.0, None], ids=["no-guidance", "default-guidance"])
def test_classifier_recognises_the_digits(pipe, classifier, guidance):
    labels = [c for c in range(10) for _ in range(10)]
    kwargs = {} if guidance is None else {"guidance_scale": guidance}
    images = pipe(class_labels=labels, num_inference_steps=32, generator=_seed(),
                  output_type="np", **kwargs)  # fmt: skip
    x = images.images[..., 0].reshape(len(labels), 64) * 16  # the dataset's 0..16 scale
    predicted = classifier.predict(x)
    accuracy = float(np.mean(predicted == labels))
    per_class = {c: float(np.mean(predicted[np.array(labels) == c] == c)) for c in range(10)}
    print(f"guidance {guidance or 'default'}: classifier accuracy over 100 samples: "
          f"{accuracy:.2f}; per class {per_class}")  # fmt: skip
    if guidance is None:
        _save_grid(images.images[..., 0], labels)
    assert accuracy >= MIN_ACCURACY, per_class


def _save_grid(images: np.ndarray, labels: list[int]) -> None:
    """One row per class (10 samples each), each digit 8x8 shown 6x, 2 grey pixels apart."""
    from PIL import Image

    ARTIFACTS.mkdir(exist_ok=True)
    tiles = np.pad(images, ((0, 0), (1, 1), (1, 1)), constant_values=0.5)
    rows = [np.concatenate(list(tiles[i * 10 : i * 10 + 10]), axis=1) for i in range(10)]
    picture = Image.fromarray((np.concatenate(rows) * 255).round().astype(np.uint8), "L")
    picture.resize((picture.width * 6, picture.height * 6), Image.Resampling.NEAREST).save(
        ARTIFACTS / "digits_grid.png"
    )


def test_denoising_trajectory_video(pipe):
    """The example video: the ten digits denoising side by side, one frame per step, made
    offline with tpu_lab.media (kept as tests/artifacts/digits_trajectory.mp4)."""
    av = pytest.importorskip("av", reason="PyAV is missing: pip install 'tpu-lab[video]'")
    from tpu_lab.media import Trajectory

    trajectory = Trajectory(pipe)
    out = pipe(
        class_labels=list(range(10)),
        num_inference_steps=24,
        generator=_seed(3),
        output_type="np",
        callback_on_step_end=trajectory,
        callback_on_step_end_tensor_inputs=["latents"],
    )
    video = trajectory.video(fps=8, labels=[str(c) for c in range(10)])
    assert video.format == "mp4"
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / "digits_trajectory.mp4"
    path.write_bytes(video.data)
    with av.open(str(path)) as container:
        frames = list(container.decode(container.streams.video[0]))
    assert len(frames) == 24
    assert frames[0].width == video.size[0] and frames[0].height == video.size[1]
    last = trajectory.decoded()[-1, :, 0].numpy()  # the final step is the pipeline's output
    np.testing.assert_allclose(last, out.images[..., 0], atol=1e-6)


def test_tpu_matches_cpu_bitwise(pipe):
    cpu = digits_pipeline(device="cpu")
    cpu.set_progress_bar_config(disable=True)
    kwargs = {"class_labels": [3, 8], "num_inference_steps": 6, "output_type": "pt"}
    on_tpu = pipe(generator=_seed(1), guidance_scale=2.0, **kwargs).images
    on_cpu = cpu(generator=_seed(1), guidance_scale=2.0, **kwargs).images
    assert on_tpu.device == torch.device("tpu", 0)
    assert torch.equal(on_tpu.cpu(), on_cpu)


def test_output_types(pipe):
    kwargs = {"class_labels": [1, 2, 3], "num_inference_steps": 2}
    pil = pipe(generator=_seed(), **kwargs).images
    assert [(im.size, im.mode) for im in pil] == [((8, 8), "L")] * 3
    arr = pipe(generator=_seed(), output_type="np", **kwargs).images
    assert arr.shape == (3, 8, 8, 1) and arr.min() >= 0 and arr.max() <= 1
    pt = pipe(generator=_seed(), output_type="pt", **kwargs).images
    assert pt.shape == (3, 1, 8, 8)
    np.testing.assert_array_equal(pt.cpu().permute(0, 2, 3, 1).numpy(), arr)
    assert np.array_equal(np.asarray(pil[0]), (arr[0, ..., 0] * 255).round().astype(np.uint8))
    single = pipe(class_labels=7, num_inference_steps=2, return_dict=False)[0]
    assert len(single) == 1


def test_step_callback_sees_and_replaces_the_latents(pipe):
    seen = []

    def callback(p, step, t, tensors):
        seen.append((step, int(t), tuple(tensors["latents"].shape), tensors["latents"].device))
        return {"latents": torch.zeros_like(tensors["latents"])}

    out = pipe(
        class_labels=[4, 5],
        num_inference_steps=4,
        generator=_seed(),
        output_type="pt",
        callback_on_step_end=callback,
        callback_on_step_end_tensor_inputs=["latents"],
    ).images
    assert [s[0] for s in seen] == [0, 1, 2, 3]
    assert [s[1] for s in seen] == pipe.scheduler.timesteps.tolist()
    assert {s[2:] for s in seen} == {((2, 1, 8, 8), torch.device("tpu", 0))}
    assert torch.equal(out.cpu(), torch.full((2, 1, 8, 8), 0.5))  # zeros in [-1, 1] -> 0.5


def test_compiled_unet_compiles_once_for_all_steps(pipe, fresh_dynamo, use_lowering):
    from tpu_lab.events import log

    use_lowering("aten")
    kwargs = {"class_labels": [0, 9], "num_inference_steps": 5, "output_type": "pt"}
    eager = pipe(generator=_seed(2), **kwargs).images
    compiled = DigitsPipeline(
        unet=torch.compile(pipe.unet, backend="tpu", fullgraph=True, dynamic=False),
        scheduler=pipe.scheduler,
    )
    compiled.set_progress_bar_config(disable=True)
    start = log.events()[-1].seq if log.events() else 0  # the log is bounded: count by seq
    images = compiled(generator=_seed(2), **kwargs).images
    kinds = [e.kind for e in log.events() if e.seq > start]
    assert kinds.count("compile") == 1 and "recompile" not in kinds
    torch.testing.assert_close(images.cpu(), eager.cpu(), atol=1e-5, rtol=0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"class_labels": [10]}, "class_labels [10] are not digits: each label must be an int "
         "from 0 to 9."),
        ({"class_labels": ["7"]}, "class_labels ['7'] are not digits: each label must be an int "
         "from 0 to 9."),
        ({"class_labels": []}, "class_labels is empty: pass one digit (0-9) per image wanted."),
        ({"class_labels": [1], "num_inference_steps": 0}, "num_inference_steps=0: use an int "
         "from 1 to 1000 (the model was trained with 1000 noise levels; 32 is plenty)."),
        ({"class_labels": [1], "guidance_scale": 0.5}, "guidance_scale=0.5: use 1.0 (no "
         "guidance) or more."),
        ({"class_labels": [1], "output_type": "jpg"}, "output_type='jpg': use 'pil', 'np' or "
         "'pt'."),
        ({"class_labels": [1], "callback_on_step_end_tensor_inputs": ["noise"]},
         "callback_on_step_end_tensor_inputs=['noise']: this pipeline passes only ['latents']."),
        ({"class_labels": [1, 2], "latents": torch.zeros(1, 1, 8, 8)}, "latents of shape "
         "(1, 1, 8, 8) for 2 labels: pass a tensor of shape (2, 1, 8, 8)."),
    ],
)  # fmt: skip
def test_bad_input_says_what_to_pass(pipe, kwargs, message):
    with pytest.raises(DigitsInputError) as info:
        pipe(**kwargs)
    assert str(info.value) == message


def test_default_guidance_is_the_measured_one():
    import inspect

    from tpu_lab.models.digits import DEFAULT_GUIDANCE, MAX_GUIDANCE

    default = inspect.signature(DigitsPipeline.__call__).parameters["guidance_scale"].default
    assert default == DEFAULT_GUIDANCE == 1.5 and MAX_GUIDANCE == 2.0
    from tpu_lab.apps import image as app

    assert app.MAX_GUIDANCE == MAX_GUIDANCE


def test_missing_folder_says_what_to_pass(tmp_path):
    with pytest.raises(tpu_lab.TpuLabError, match="is not a diffusers pipeline folder"):
        digits_pipeline(path=tmp_path)
