"""The embedded text-to-image model (a tiny FluxPipeline of coloured shapes) and its world.

- the judge (``shapes_world.judge``) passes every scene the generator renders, and fails wrong
  captions, so that its score of the model means something;
- the shipped folder is an ordinary FluxPipeline folder loaded offline by ``from_pretrained``;
- the VAE (trained, 4x smaller) keeps what the judge checks in its reconstructions;
- the model honours at least 80% of 100 random prompts (grid kept as
  tests/artifacts/shapes_grid.png: look at it);
- the "tpu" device gives the CPU's images (float32 and bfloat16); the transformer compiled the
  announcement's way gives the eager images, compiles once per size, and recompiles, explained,
  when the size changes.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch

import tpu_lab  # noqa: F401  (the "tpu" device)
from tpu_lab.models import shapes_world as world

pytest.importorskip("diffusers", reason="diffusers is missing: pip install 'tpu-lab[hf]'")

from tpu_lab.models import shapes  # noqa: E402

ARTIFACTS = Path(__file__).parent / "artifacts"
#: The issue's bar: the share of 100 random prompts the judge finds honoured.
MIN_HONOURED = 0.80
#: Of 100 random scenes, how many the VAE's reconstructions must keep judged right (measured: 91).
RECONSTRUCTED_MIN = 85


def _seed(n: int = 0) -> torch.Generator:
    return torch.Generator("cpu").manual_seed(n)


def _prompts(n: int, seed: int = 1234) -> list[str]:
    rng = random.Random(seed)
    return [world.caption(world.sample_scene(rng)) for _ in range(n)]


# --- the world and its judge ------------------------------------------------------------------


def test_the_judge_passes_every_rendered_scene():
    rng = random.Random(7)
    for _ in range(300):
        scene = world.sample_scene(rng)
        verdict = world.judge(world.render(scene), world.caption(scene))
        assert verdict, (world.caption(scene), verdict.failures)


def test_the_judge_passes_every_rendered_clip():
    rng = random.Random(8)
    for _ in range(60):
        clip = world.sample_clip(rng)
        verdict = world.judge_clip(world.render_clip(clip), world.clip_caption(clip))
        assert verdict, (world.clip_caption(clip), verdict.failures)


def test_the_judge_fails_the_wrong_caption():
    scene = world.Scene((world.Thing("circle", "red", 7, 8, 8),), "black", "large", "top left")
    image = world.render(scene)
    assert world.judge(image, "a large red circle in the top left on a black background")
    cases = {
        "a large blue circle in the top left on a black background": "no blue object",
        "a large red square in the top left on a black background":
            "the red object is a circle, not a square",
        "a large red circle in the bottom right on a black background":
            "the object is in the top left",
        "a small red circle in the top left on a black background": "the object is large",
        "a large red circle in the top left on a gray background":
            "background is black, not gray",
    }  # fmt: skip
    for prompt, failure in cases.items():
        assert world.judge(image, prompt).failures == (failure,), prompt


def test_misses_are_counted_by_their_first_failure_with_the_numbers_hidden():
    clip = world.Clip(world.Thing("circle", "red", 7, 9, 16), "black", "large", "moving right")
    video = world.render_clip(clip)
    right = "a red circle moving right on a black background"
    small = world.Clip(world.Thing("circle", "red", 4, 6, 16), "black", "small", "moving right")
    verdicts = [world.judge_clip(video, right),
                world.judge_clip(video[::-1], right),  # 14 pixels the wrong way
                world.judge_clip(world.render_clip(small)[::-1], right),  # 20, small
                world.judge_clip(video, right.replace("red", "blue"))]  # fmt: skip
    assert verdicts[0]
    assert world.misses_by_kind(verdicts) == {"the object moved -N px, not moving right": 2,
                                              "no blue object at the start": 1}  # fmt: skip


def test_the_judge_reads_relations():
    a, b = world.Thing("square", "blue", 5, 8, 16), world.Thing("triangle", "yellow", 5, 24, 16)
    image = world.render(world.Scene((a, b), "gray", relation="left of"))
    assert world.judge(image, "a blue square left of a yellow triangle on a gray background")
    verdict = world.judge(image, "a yellow triangle left of a blue square on a gray background")
    assert verdict.failures == ("the first object is not left of the second",)


def test_captions_parse_back_and_other_text_is_refused():
    request = world.parse("a magenta square above an orange circle".replace("orange", "cyan"))
    assert request.objects == (("magenta", "square"), ("cyan", "circle"))
    assert request.relation == "above" and request.background is None
    with pytest.raises(ValueError, match="is not a caption of the shapes world"):
        world.parse("a photo of a cat")


def test_the_world_is_rich_enough():
    rng = random.Random(0)
    scenes = [world.sample_scene(rng) for _ in range(2000)]
    assert len(world.COLOURS) >= 6 and len(world.SHAPES) >= 3
    assert {len(s.things) for s in scenes} == {1, 2}
    assert {s.place for s in scenes} - {None} == set(world.PLACES)
    assert {t.colour for s in scenes for t in s.things} == set(world.COLOURS)
    assert len({world.caption(s) for s in scenes}) > 1000


# --- the shipped pipeline ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def pipe():
    p = shapes.shapes_pipeline()
    p.set_progress_bar_config(disable=True)
    return p


def test_shipped_folder_is_a_small_flux_pipeline():
    index = json.loads((shapes.FOLDER / "model_index.json").read_text())
    assert index["_class_name"] == "FluxPipeline"
    assert index["transformer"] == ["diffusers", "FluxTransformer2DModel"]
    assert index["vae"] == ["diffusers", "AutoencoderKL"]
    assert index["text_encoder"] == ["transformers", "CLIPTextModel"]
    assert index["text_encoder_2"] == ["transformers", "T5EncoderModel"]
    # transformers 5 saves a PreTrainedTokenizerFast under its new name, TokenizersBackend
    assert index["tokenizer"] == index["tokenizer_2"] == ["transformers", "TokenizersBackend"]
    assert index["scheduler"] == ["diffusers", "FlowMatchEulerDiscreteScheduler"]
    size = sum(f.stat().st_size for f in shapes.FOLDER.rglob("*.safetensors"))
    assert size < 10 * 2**20, size  # 7.3 MB transformer, 0.9 MB VAE, 0.6 MB text encoders


def test_loads_offline_through_from_pretrained(monkeypatch):
    from diffusers import FluxPipeline, FluxTransformer2DModel

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    pipe = FluxPipeline.from_pretrained(shapes.FOLDER)
    assert isinstance(pipe.transformer, FluxTransformer2DModel)
    assert pipe.transformer._tp_plan  # Diffusers' own tensor-parallel plan for Flux
    assert pipe.tokenizer("a red circle").input_ids == [3, 24, 33, 1]


@pytest.fixture(scope="module")
def hundred(pipe):
    """100 random prompts (seed 1234) and the model's 32x32 images of them at the default
    guidance, as uint8."""
    prompts = _prompts(100)
    images = pipe(prompts, num_inference_steps=shapes.STEPS, generator=_seed(), output_type="np",
                  negative_prompt="", true_cfg_scale=shapes.GUIDANCE, **shapes.CALL).images  # fmt: skip
    _save_grid(images[:40])
    return prompts, (images * 255).round().astype(np.uint8)


def test_it_has_learned_the_backgrounds_and_the_colours(hundred):
    """Below the judge, measured with the shipped weights at the default guidance: the
    background of all 100 prompts, and all 100 with every requested colour on 12+ pixels."""
    prompts, images = hundred
    background = colours = 0
    for prompt, image in zip(prompts, images, strict=True):
        request = world.parse(prompt)
        background += world.background_of(image) == request.background
        index = world.classify(image)
        colours += all((index == list(world.COLOURS).index(c)).sum() >= 12
                       for c, _ in request.objects)  # fmt: skip
    print(f"background right {background}/100, requested colours present {colours}/100")
    assert background >= 95 and colours >= 95


def test_honours_80_percent_of_100_random_prompts(hundred):
    prompts, images = hundred
    verdicts = [world.judge(im, p) for im, p in zip(images, prompts, strict=True)]
    score = float(np.mean([bool(v) for v in verdicts]))
    print(f"judge: {score:.2f} of 100 prompts honoured")
    assert score >= MIN_HONOURED, [(p, v.failures) for p, v in zip(prompts, verdicts, strict=True)
                                   if not v]  # fmt: skip


def _save_grid(images: np.ndarray, columns: int = 10) -> None:
    from PIL import Image

    ARTIFACTS.mkdir(exist_ok=True)
    tiles = (np.pad(images, ((0, 0), (1, 1), (1, 1), (0, 0)), constant_values=1) * 255)
    rows = [np.concatenate(list(tiles[i : i + columns]), axis=1)
            for i in range(0, len(tiles), columns)]  # fmt: skip
    picture = Image.fromarray(np.concatenate(rows).round().astype(np.uint8))
    picture.resize((picture.width * 4, picture.height * 4), Image.Resampling.NEAREST).save(
        ARTIFACTS / "shapes_grid.png"
    )


def test_tpu_matches_cpu(pipe):
    cpu = shapes.shapes_pipeline(device="cpu")
    cpu.set_progress_bar_config(disable=True)
    kwargs = {"prompt": _prompts(2), "num_inference_steps": 4, "output_type": "pt", **shapes.CALL}
    on_tpu = pipe(generator=_seed(1), **kwargs).images
    on_cpu = cpu(generator=_seed(1), **kwargs).images
    assert on_tpu.device == torch.device("tpu", 0)
    torch.testing.assert_close(on_tpu.cpu(), on_cpu, atol=1e-6, rtol=0)


def test_bfloat16_on_tpu_matches_bfloat16_on_cpu():
    kwargs = {"prompt": _prompts(2), "num_inference_steps": 4, "output_type": "pt", **shapes.CALL}
    images = []
    for device in ("tpu", "cpu"):
        p = shapes.shapes_pipeline(device=device, dtype=torch.bfloat16)
        p.set_progress_bar_config(disable=True)
        assert p.transformer.dtype == torch.bfloat16
        images.append(p(generator=_seed(1), **kwargs).images.float().cpu())
    torch.testing.assert_close(images[0], images[1], atol=1e-2, rtol=0)


def test_guided_generation_runs_the_empty_prompt_too(pipe):
    kwargs = {"prompt": _prompts(1), "num_inference_steps": 3, "output_type": "pt", **shapes.CALL}
    plain = pipe(generator=_seed(2), **kwargs).images
    guided = pipe(generator=_seed(2), negative_prompt="", true_cfg_scale=2.0, **kwargs).images
    assert not torch.equal(plain.cpu(), guided.cpu())


def test_compiled_transformer_compiles_once_per_size_and_explains_the_recompile(
    pipe, fresh_dynamo, use_lowering
):
    import copy

    from diffusers import FluxPipeline

    from tpu_lab.events import log

    use_lowering("aten")
    kwargs = {"prompt": _prompts(2), "num_inference_steps": 4, "output_type": "pt",
              "max_sequence_length": shapes.TOKENS}  # fmt: skip
    eager = pipe(generator=_seed(3), height=32, width=32, **kwargs).images
    transformer = copy.copy(pipe.transformer)
    transformer.compile(backend="tpu", fullgraph=True, dynamic=False)  # the announcement's way
    compiled = FluxPipeline(**{**pipe.components, "transformer": transformer})
    compiled.set_progress_bar_config(disable=True)

    def events(run):
        start = log.events()[-1].seq if log.events() else 0
        result = run()
        return result, [e for e in log.events() if e.seq > start and "compile" in e.kind]

    images, first = events(lambda: compiled(generator=_seed(3), height=32, width=32,
                                            **kwargs).images)  # fmt: skip
    assert [e.kind for e in first] == ["compile"]  # once for all 4 steps
    torch.testing.assert_close(images.cpu(), eager.cpu(), atol=1e-4, rtol=0)
    _, again = events(lambda: compiled(generator=_seed(4), height=32, width=32, **kwargs))
    assert again == []
    _, resized = events(lambda: compiled(generator=_seed(3), height=48, width=48, **kwargs))
    assert [e.kind for e in resized] == ["recompile"]
    # 32x32 pixels are 8x8 latents, 16 tokens of packed 2x2 patches; 48x48 are 12x12, 36
    assert "changed from 16 to 36" in resized[0].summary, resized[0].summary


def test_the_vae_reconstructs_what_the_judge_checks(pipe):
    """The ceiling the VAE sets: its reconstructions of 100 random scenes, judged (measured
    91 of 100 for the shipped VAE); a 32x32 image is 8x8 latent pixels."""
    rng = random.Random(99)
    drawn = [world.sample_scene(rng) for _ in range(100)]
    x = torch.from_numpy(np.stack([world.render(s) for s in drawn])).permute(0, 3, 1, 2)
    vae = pipe.vae
    with torch.no_grad():
        z = vae.encode(x.to(vae.device).float() / 127.5 - 1).latent_dist.mode()
        out = vae.decode(z).sample.cpu()
    assert z.shape == (100, shapes.VAE_CONFIG["latent_channels"], 8, 8)
    pixels = ((out.permute(0, 2, 3, 1) + 1) / 2).numpy()  # as FluxPipeline's "np" output
    passed = sum(bool(world.judge(p, world.caption(s))) for p, s in zip(pixels, drawn,
                                                                        strict=True))  # fmt: skip
    print(f"judge on the VAE's reconstructions: {passed} of 100")
    assert passed >= RECONSTRUCTED_MIN


def test_missing_folder_says_what_to_pass(tmp_path):
    with pytest.raises(shapes.ShapesModelError, match="is not a diffusers pipeline folder"):
        shapes.shapes_pipeline(path=tmp_path)
