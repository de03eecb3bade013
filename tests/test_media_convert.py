"""tpu_lab.media.convert: every input kind to 8-bit frames; layouts, value ranges, errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

import tpu_lab  # noqa: F401  (installs the "tpu" device)
from tpu_lab.errors import MediaError
from tpu_lab.media import to_pil
from tpu_lab.media.convert import detect_layout, detect_value_range, parse_value_range, to_media


def _pattern(c=3, h=6, w=10, seed=0):
    """A (C, H, W) float image in [0, 1] with distinct values."""
    g = torch.Generator().manual_seed(seed)
    return torch.rand(c, h, w, generator=g)


def _expected_u8(x01: np.ndarray) -> np.ndarray:
    return np.clip(x01 * 255 + 0.5, 0, 255).astype(np.uint8)


# ---------------------------------------------------------------------------------------
# Input kinds


def test_cpu_tensor_chw_in_0_1():
    x = _pattern()
    media = to_media(x)
    assert media.layout == "CHW" and not media.video and media.batch == 1
    assert media.value_range.name == "[0, 1]" and media.value_range.detected
    assert np.array_equal(media.frames[0][0], _expected_u8(x.permute(1, 2, 0).numpy()))


def test_tpu_tensor_equals_cpu_tensor():
    x = _pattern() * 2 - 1
    on_tpu = to_media(x.to("tpu"))
    on_cpu = to_media(x)
    assert on_tpu.source == "torch.Tensor (3, 6, 10) float32 on tpu:0"
    assert on_tpu.value_range.name == "[-1, 1]"
    assert np.array_equal(on_tpu.frames[0][0], on_cpu.frames[0][0])


def test_bfloat16_and_requires_grad_tensors():
    x = _pattern().requires_grad_()
    media = to_media(x.to(torch.bfloat16).to("tpu"))
    expected = _expected_u8(x.detach().to(torch.bfloat16).float().permute(1, 2, 0).numpy())
    assert np.array_equal(media.frames[0][0], expected)


def test_numpy_hwc_uint8_passes_through():
    arr = np.arange(6 * 10 * 3, dtype=np.uint8).reshape(6, 10, 3)
    media = to_media(arr)
    assert media.layout == "HWC" and media.value_range.name == "0..255"
    assert np.array_equal(media.frames[0][0], arr)


def test_grey_2d_and_single_channel():
    arr = np.linspace(0, 1, 24).reshape(4, 6)
    media = to_media(arr)
    assert media.layout == "HW" and media.frames[0][0].shape == (4, 6, 1)
    assert to_pil(arr).mode == "L"
    assert to_media(torch.tensor(arr)[None]).layout == "CHW"


@pytest.mark.parametrize("mode", ["RGB", "RGBA", "L", "P", "1", "I;16"])
def test_pil_modes(mode):
    img = Image.new("RGB", (7, 5), (200, 100, 50)).convert(mode)
    media = to_media(img)
    assert media.source.startswith(f"PIL {mode} 7×5")
    assert media.frames[0][0].shape[:2] == (5, 7)
    assert media.frames[0][0].shape[2] in (1, 3, 4)


def test_pil_image_round_trips():
    img = Image.fromarray(np.arange(5 * 7 * 3, dtype=np.uint8).reshape(5, 7, 3))
    out = to_pil(img)
    assert np.array_equal(np.asarray(out), np.asarray(img))


def test_batch_nchw_tensor_to_list_of_pil():
    x = torch.stack([_pattern(seed=i) for i in range(3)])
    images = to_pil(x)
    assert len(images) == 3
    for i, img in enumerate(images):
        assert np.array_equal(np.asarray(img), _expected_u8(x[i].permute(1, 2, 0).numpy()))


def test_batch_nhwc_numpy():
    arr = np.random.default_rng(0).random((2, 6, 10, 3))
    media = to_media(arr)
    assert media.layout == "NHWC" and media.batch == 2 and not media.video


def test_list_of_pil_is_a_batch():
    images = [Image.new("RGB", (8, 8), c) for c in ("red", "green", "blue")]
    media = to_media(images)
    assert media.batch == 3 and not media.video
    assert media.source == "list of 3 PIL images"
    assert tuple(media.frames[0][2][0, 0]) == (0, 0, 255)


def test_diffusers_image_output_pil_numpy_and_tensor():
    from diffusers.pipelines.pipeline_utils import ImagePipelineOutput

    x = torch.stack([_pattern(seed=i) for i in range(2)])
    as_np = x.permute(0, 2, 3, 1).numpy()
    pil = [Image.fromarray(_expected_u8(a)) for a in as_np]
    outputs = [ImagePipelineOutput(images=v) for v in (x, as_np, pil)]
    frames = [to_media(o) for o in outputs]
    assert frames[0].source.startswith("ImagePipelineOutput.images: torch.Tensor")
    for media in frames:
        assert media.batch == 2
        assert np.array_equal(media.frames[0][1], _expected_u8(as_np[1]))


def test_return_dict_false_tuple():
    x = torch.stack([_pattern(seed=i) for i in range(2)])
    assert to_media((x,)).batch == 2


def test_frames_output_is_a_video():
    class VideoOutput:  # diffusers video pipelines return .frames (batch, time, ...)
        frames = np.random.default_rng(0).random((1, 5, 6, 10, 3))

    media = to_media(VideoOutput())
    assert media.video and len(media.frames) == 5 and media.layout == "NTHWC"


def test_tchw_layout_makes_a_video():
    x = torch.rand(7, 3, 6, 10)
    media = to_media(x, layout="TCHW")
    assert media.video and len(media.frames) == 7 and media.batch == 1
    assert np.array_equal(media.frames[4][0], _expected_u8(x[4].permute(1, 2, 0).numpy()))


def test_list_of_frames_with_layout_t_is_a_video():
    frames = [Image.new("L", (8, 6), v) for v in (0, 100, 200)]
    media = to_media(frames, layout="THW")
    assert media.video and len(media.frames) == 3
    assert media.frames[1][0][0, 0, 0] == 100


def test_nested_lists_are_videos_of_a_batch():
    clip = [Image.new("RGB", (8, 6), c) for c in ("red", "blue")]
    media = to_media([clip, clip, clip])
    assert media.video and len(media.frames) == 2 and media.batch == 3


@pytest.mark.parametrize(
    ("shape", "layout"),
    [((2, 4, 3, 6, 10), "NTCHW"), ((2, 4, 6, 10, 3), "NTHWC"), ((2, 4, 7, 6, 10), "NCTHW")],
)
def test_five_dim_video_layouts(shape, layout):
    media = to_media(torch.rand(shape))
    assert media.layout == layout and media.video and media.batch == 2
    time_axis = layout.index("T")
    assert len(media.frames) == shape[time_axis]


# ---------------------------------------------------------------------------------------
# Layout rules


@pytest.mark.parametrize(
    ("shape", "torch_order", "expected"),
    [
        ((3, 8, 8), True, "CHW"),
        ((8, 8, 3), True, "HWC"),
        ((3, 8, 3), True, "CHW"),
        ((3, 8, 3), False, "HWC"),
        ((1, 8, 8), False, "CHW"),
        ((2, 3, 8, 8), True, "NCHW"),
        ((2, 8, 8, 4), False, "NHWC"),
    ],
)
def test_detect_layout(shape, torch_order, expected):
    assert detect_layout(shape, torch_order) == expected


def test_layout_forces_the_order():
    arr = np.zeros((3, 8, 3))  # numpy: HWC by default
    assert to_media(arr, layout="CHW").frames[0][0].shape == (8, 3, 3)


def test_layout_errors_exact_text():
    with pytest.raises(MediaError) as err:
        to_media(torch.rand(3, 8, 8), layout="NCHW")
    assert str(err.value) == (
        "layout='NCHW' does not fit an array with 3 dimensions: name each axis once with N "
        "(batch), T (time), C (channels), H and W, e.g. 'CHW'."
    )
    with pytest.raises(MediaError) as err:
        to_media(torch.rand(5, 8, 8))
    assert str(err.value) == (
        "Cannot tell the channel axis of shape (5, 8, 8): images have 1, 3 or 4 channels "
        "first (CHW) or last (HWC). Pass layout=, e.g. 'NHW' for grey images."
    )
    assert to_media(torch.rand(5, 8, 8), layout="NHW").batch == 5
    with pytest.raises(MediaError, match=r"read as NCHW has 2 channels"):
        to_media(torch.rand(4, 2, 8, 8), layout="NCHW")
    with pytest.raises(MediaError, match=r"Cannot show an array with 6 dimensions"):
        to_media(np.zeros((1, 1, 1, 1, 1, 1)))
    with pytest.raises(MediaError, match=r"^Cannot show a dict: pass a PIL image"):
        to_media({"a": 1})
    with pytest.raises(MediaError, match=r"^Nothing to show: the list is empty\.$"):
        to_media([])


# ---------------------------------------------------------------------------------------
# Value ranges


@pytest.mark.parametrize(
    ("values", "name"),
    [
        (np.array([0.0, 0.5, 1.0]), "[0, 1]"),
        (np.array([-0.0005, 1.0004]), "[0, 1]"),  # within the rounding tolerance
        (np.array([-1.0, 0.2, 0.9]), "[-1, 1]"),
        (np.array([0.0, 17.0, 255.0]), "0..255"),  # whole numbers: 8-bit values as floats
        (np.array([0.0, 17.5, 200.0]), "min..max"),
        (np.array([-3.0, 2.5]), "min..max"),  # latents
        (np.array([0, 255], dtype=np.int64), "0..255"),
        (np.array([True, False]), "[0, 1]"),
        (np.array([3, 9], dtype=np.uint8), "0..255"),
    ],
)
def test_detect_value_range(values, name):
    assert detect_value_range(values).name == name


def test_minmax_stretches_latents():
    x = torch.tensor([[[-3.0, 0.0, 3.0]]])  # (1, 1, 3): CHW grey
    media = to_media(x)
    assert media.value_range.name == "min..max"
    assert media.frames[0][0][..., 0].tolist() == [[0, 128, 255]]


@pytest.mark.parametrize(
    ("given", "low", "high"),
    [("0,1", 0, 1), ("-1, 1", -1, 1), ("uint8", 0, 255), ((0, 4), 0, 4), ([-2, 2], -2, 2)],
)
def test_value_range_set(given, low, high):
    vr = parse_value_range(given)
    assert (vr.low, vr.high, vr.detected) == (low, high, False)


def test_set_range_clips():
    x = torch.tensor([[[-2.0, 0.0, 0.5, 2.0]]])
    media = to_media(x, value_range="0,1")
    assert media.frames[0][0][..., 0].tolist() == [[0, 0, 128, 255]]
    assert media.value_range.describe() == "[0, 1] (set)"


def test_uint8_range_on_floats():
    x = torch.tensor([[[0.0, 127.6, 255.0]]])
    assert to_media(x, value_range="uint8").frames[0][0][..., 0].tolist() == [[0, 128, 255]]


def test_value_range_error_exact_text():
    with pytest.raises(MediaError) as err:
        parse_value_range("0..1")
    assert str(err.value) == (
        "value_range='0..1' is not a value range: use '0,1', '-1,1', 'uint8' (0..255), "
        "'minmax', 'auto' or a (low, high) pair with low < high."
    )
    with pytest.raises(MediaError, match="is not a value range"):
        parse_value_range((1, 0))


def test_nan_values_are_reported():
    x = torch.tensor([[[0.0, float("nan"), 1.0]]])
    media = to_media(x)
    assert media.frames[0][0][..., 0].tolist() == [[0, 0, 255]]
    assert media.notes == ["1 NaN/inf values shown as the low end"]


def test_complex_tensor_refused():
    with pytest.raises(MediaError, match=r"^Cannot show a complex tensor \(torch.complex64\)"):
        to_media(torch.zeros(3, 4, 4, dtype=torch.complex64))
