"""tpu_lab.media.preview: the Preview view (text, HTML, PNG), grids, videos, saving and the
save-path rule with its exact errors."""

from __future__ import annotations

import base64
import io
import os
import re

import av
import numpy as np
import pytest
import torch
from PIL import Image

import tpu_lab  # noqa: F401  (installs the "tpu" device)
from tpu_lab.errors import MediaError
from tpu_lab.media import Preview, preview, save_policy, set_save_policy
from tpu_lab.media import video as video_mod
from tpu_lab.media.grid import LABEL_HEIGHT, PAD
from tpu_lab.views import view


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    """The current directory is a fresh temporary folder (the default save folder)."""
    monkeypatch.chdir(tmp_path)
    set_save_policy(None)
    yield tmp_path
    set_save_policy(None)


def _batch(n=2, size=16):
    g = torch.Generator().manual_seed(0)
    return torch.rand(n, 3, size, size, generator=g) * 2 - 1


def _png(bundle):
    return Image.open(io.BytesIO(base64.b64decode(bundle["image/png"])))


def _video_bytes(html):
    match = re.search(r"src='data:video/mp4;base64,([^']+)'", html)
    assert match, html[:200]
    return base64.b64decode(match.group(1))


def _decoded_frames(data):
    with av.open(io.BytesIO(data)) as c:
        return [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]


# ---------------------------------------------------------------------------------------
# Stills


def test_single_image_text_html_and_png():
    x = torch.zeros(3, 64, 96)
    x[0] = 1.0  # red
    p = preview(x.to("tpu"))
    assert isinstance(p, Preview) and p.kind == "image" and p.size == (96, 64)
    assert view(p).to_text(width=100) == (
        "Preview: image 96×64\n"
        "  from torch.Tensor (3, 64, 96) float32 on tpu:0, layout CHW\n"
        "  values 0..1 -> range [0, 1] (detected)"
    )
    bundle = view(p)._repr_mimebundle_()
    assert set(bundle) == {"text/plain", "text/html", "image/png"}
    img = _png(bundle)
    assert img.size == (96, 64) and img.getpixel((5, 5)) == (255, 0, 0)
    html = bundle["text/html"]
    assert html.startswith("<div class='tex2jax_ignore mathjax_ignore'><figure class='tpu-lab-preview'")
    assert "src='data:image/png;base64," in html and "width='96' height='64'" in html
    assert "<figcaption" in html and "range [0, 1] (detected)" in html


def test_batch_grid_with_labels():
    x = _batch(3, size=64)
    p = preview(x, labels=["seven", 3, "a very long label that is clipped"])
    cell_h = 64 + LABEL_HEIGHT
    assert p.size == (3 * 64 + 4 * PAD, cell_h + 2 * PAD)
    assert "grid of 3" in view(p).to_text() and "labels: seven, 3, a very long" in view(p).to_text()
    img = p.image.convert("RGB")
    # tile 2 is image 2, unscaled, at its grid position
    tile = np.asarray(img)[PAD : PAD + 64, PAD + 2 * (64 + PAD) : PAD + 2 * (64 + PAD) + 64]
    expected = np.clip((x[2].permute(1, 2, 0).numpy() + 1) / 2 * 255 + 0.5, 0, 255)
    assert np.array_equal(tile, expected.astype(np.uint8))
    # the label strip under the tiles has dark text pixels
    strip = np.asarray(img.convert("L"))[PAD + 64 : PAD + cell_h]
    assert strip.min() < 100


def test_small_images_are_enlarged():
    p = preview(np.eye(8), value_range="0,1")
    assert p.scale == 8 and p.size == (64, 64)
    assert "shown ×8" in view(p).to_text()


def test_labels_must_match_the_batch():
    with pytest.raises(MediaError) as err:
        preview(_batch(2), labels=["only one"])
    assert str(err.value) == (
        "labels has 1 entries but the batch has 2 images: give one label per image."
    )


def test_pipeline_output_list_of_pil():
    from diffusers.pipelines.pipeline_utils import ImagePipelineOutput

    images = [Image.new("RGB", (32, 32), c) for c in ("red", "green", "blue", "white", "black")]
    p = preview(ImagePipelineOutput(images=images))
    assert "grid of 5" in view(p).to_text()
    assert view(p).to_text().splitlines()[1] == (
        "  from ImagePipelineOutput.images: list of 5 PIL images, layout HWC"
    )
    assert p.size == (3 * 64 + 4 * PAD, 2 * 64 + 3 * PAD)  # 3 columns, ×2 enlarged


# ---------------------------------------------------------------------------------------
# Videos


def test_frame_sequence_is_an_inline_h264_video():
    frames = torch.rand(10, 3, 24, 32, generator=torch.Generator().manual_seed(1))
    p = preview(frames.to("tpu"), layout="TCHW", fps=5)
    assert p.kind == "video" and p.format == "mp4" and len(p.frames) == 10
    head = view(p).to_text().splitlines()[0]
    assert re.fullmatch(
        r"Preview: video 10 frames 64×48 at 5 fps \(2\.0 s\), shown ×2, H\.264 MP4 \d+\.\d KB",
        head,
    ), head
    bundle = view(p)._repr_mimebundle_()
    assert set(bundle) == {"text/plain", "text/html"}
    html = bundle["text/html"]
    # shown 4x larger than its 64x48 pixels, so that the player's controls leave it visible
    assert "<video controls autoplay loop muted playsinline width='256' height='192'" in html
    decoded = _decoded_frames(_video_bytes(html))
    assert len(decoded) == 10 and decoded[0].shape == (48, 64, 3)


def test_five_dim_batch_video_is_a_grid_per_frame():
    x = torch.rand(2, 6, 3, 64, 64)  # (batch, time, C, H, W)
    p = preview(x, labels=["a", "b"])
    decoded = _decoded_frames(p.data)
    assert len(decoded) == 6
    w, h = 2 * 64 + 3 * PAD, 64 + LABEL_HEIGHT + 2 * PAD
    assert decoded[0].shape == (h + h % 2, w + w % 2, 3)


def test_video_fallback_without_h264(monkeypatch, in_tmp):
    monkeypatch.setattr(video_mod, "h264_unavailable", lambda: "no libx264 in this FFmpeg")
    p = preview(torch.rand(4, 3, 64, 64), layout="TCHW")
    assert p.format == "webp"
    assert "src='data:image/webp;base64," in view(p).to_html() and "<video" not in view(p).to_html()
    assert "  no H.264: no libx264 in this FFmpeg" in view(p).to_text().splitlines()
    assert Image.open(io.BytesIO(p.data)).n_frames == 4
    with pytest.raises(MediaError) as err:
        p.save("clip.mp4")
    assert str(err.value) == (
        "save='clip.mp4': H.264 encoding is unavailable (no libx264 in this FFmpeg); save as "
        ".webp or .gif instead."
    )
    assert Image.open(p.save("clip.gif")).n_frames == 4


# ---------------------------------------------------------------------------------------
# Saving


def test_save_png_jpg_and_webp(in_tmp):
    x = _batch(2, size=64)
    p = preview(x, save="grid.png")
    assert p.saved == in_tmp / "grid.png"
    assert Image.open(in_tmp / "grid.png").size == p.size
    assert f"  saved to {in_tmp / 'grid.png'}" in view(p).to_text().splitlines()
    narrow = view(p).to_text(width=30).splitlines()  # other lines are clipped, never the path
    assert f"  saved to {in_tmp / 'grid.png'}" in narrow and narrow[1].endswith("…")
    rgba = Image.new("RGBA", (64, 64), (0, 0, 255, 100))
    assert Image.open(preview(rgba, save="a.jpg").saved).format == "JPEG"
    assert Image.open(preview(rgba, save="a.webp").saved).format == "WEBP"


def test_save_mp4_makes_a_video_of_a_4d_tensor(in_tmp):
    os.mkdir(in_tmp / "out")
    p = preview(torch.rand(7, 3, 64, 64), save="out/clip.mp4")  # no layout: the .mp4 says video
    assert p.kind == "video"
    frames = _decoded_frames((in_tmp / "out" / "clip.mp4").read_bytes())
    assert len(frames) == 7 and frames[0].shape == (64, 64, 3)
    p.save("out/clip.webp")
    assert Image.open(in_tmp / "out" / "clip.webp").n_frames == 7


def test_save_errors_exact_text(in_tmp):
    image = torch.rand(3, 8, 8)
    cases = {
        "picture": "save='picture' has no file extension: end it with one of .png, .jpg, "
        ".jpeg, .webp.",
        "out.mp4": "save='out.mp4': an image cannot be saved as .mp4; use .png, .jpg, .jpeg, "
        ".webp.",
        "../x.png": f"save='../x.png' contains '..': name a file inside the save folder "
        f"{in_tmp}.",
        "a/../../x.png": f"save='a/../../x.png' contains '..': name a file inside the save "
        f"folder {in_tmp}.",
        "/etc/x.png": f"save='/etc/x.png' is outside the save folder {in_tmp}: save inside "
        f"it, or allow it with tpu_lab.media.save_policy(allow_outside=True).",
        "missing/x.png": f"save='missing/x.png': the folder {in_tmp / 'missing'} does not "
        f"exist; create it first (os.makedirs) or save elsewhere.",
    }
    for save, message in cases.items():
        with pytest.raises(MediaError) as err:
            preview(image, save=save)
        assert str(err.value) == message, save
    os.mkdir(in_tmp / "d.png")
    with pytest.raises(MediaError) as err:
        preview(image, save="d.png")
    assert str(err.value) == "save='d.png' is a folder: name a file in it, e.g. preview.png."
    with pytest.raises(MediaError) as err:
        preview(torch.rand(4, 3, 8, 8), layout="TCHW", save="clip.png")
    assert str(err.value) == (
        "save='clip.png': a video cannot be saved as .png; use .mp4, .webp, .gif."
    )
    with pytest.raises(MediaError) as err:
        preview(image, save=3)
    assert str(err.value) == "save must be a file path such as 'out.png', got 3."
    assert not [f for f in in_tmp.iterdir() if f.is_file()]


def test_absolute_path_inside_the_folder_is_accepted(in_tmp):
    p = preview(torch.rand(3, 8, 8), save=str(in_tmp / "abs.png"))
    assert p.saved == in_tmp / "abs.png" and p.saved.exists()


def test_symlink_out_of_the_folder_is_refused(in_tmp, tmp_path_factory):
    outside = tmp_path_factory.mktemp("outside")
    os.symlink(outside, in_tmp / "link")
    with pytest.raises(MediaError, match=r"^save='link/x\.png' is outside the save folder"):
        preview(torch.rand(3, 8, 8), save="link/x.png")
    assert not (outside / "x.png").exists()


def test_configured_save_folder(in_tmp, tmp_path_factory):
    base = tmp_path_factory.mktemp("previews")
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    with save_policy(base):
        p = preview(torch.rand(3, 8, 8), save="inside.png")
        assert p.saved == base / "inside.png"
        with pytest.raises(MediaError, match="is outside the save folder"):
            preview(torch.rand(3, 8, 8), save=str(elsewhere / "x.png"))
        with pytest.raises(MediaError, match="is outside the save folder"):
            preview(torch.rand(3, 8, 8), save=str(in_tmp / "x.png"))  # the cwd is outside too
    with save_policy(base, allow_outside=True):
        assert preview(torch.rand(3, 8, 8), save=str(elsewhere / "x.png")).saved.exists()
        with pytest.raises(MediaError, match="contains '..'"):  # never, even when allowed
            preview(torch.rand(3, 8, 8), save="../x.png")
    assert preview(torch.rand(3, 8, 8), save="back.png").saved == in_tmp / "back.png"
    with pytest.raises(MediaError) as err:
        set_save_policy(in_tmp / "nope")
    assert str(err.value) == f"The save folder {str(in_tmp / 'nope')!r} does not exist or is not a folder."


def test_lazy_exports():
    import tpu_lab.media as media

    assert {"preview", "Preview", "Trajectory", "progress", "encode_mp4", "to_pil"} <= set(
        dir(media)
    )
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        media.nope  # noqa: B018


@pytest.mark.parametrize("save", ["t.shape", "v6e-4"])
def test_a_save_path_no_preview_takes_fails_before_the_tensor_is_read(in_tmp, save):
    """Reading a "tpu" tensor for a preview is a sync (an event in the log): a path that no
    preview could take is refused first, so the refusal changes nothing (found by
    ``test_magics_fuzz``: ``%tpu preview t --save t.shape``)."""
    from tpu_lab.events import log

    x = torch.rand(3, 8, 8).to("tpu")
    before = log.events()[-1].seq if log.events() else 0
    with pytest.raises(MediaError, match="save="):
        preview(x, save=save)
    assert (log.events()[-1].seq if log.events() else 0) == before
