"""The embedded text-to-video model (a tiny LattePipeline of coloured shapes in motion).

- the shipped folder is an ordinary LattePipeline folder loaded offline by ``from_pretrained``;
  its transformer gets the user-defined tensor-parallel plan through ``clips.LatteTransformerTP``;
- the VAE encodes as the image model's (its encoder, byte for byte) and decodes with a decoder
  trained further on the clips' frames; its reconstructions of the clips set the ceiling of what
  the judge can pass;
- the model should honour at least 80% of 100 random prompts (``shapes_world.judge_clip``:
  colour, shape, background, and the motion): the shipped weights pass 84; they move the object
  the way the direction word says (16 of 16);
  frames of 10 clips are kept as
  tests/artifacts/clips_grid.png: look at it;
- the "tpu" device gives the CPU's clips; the transformer compiled the announcement's way gives
  the eager clips, compiles once per size, and recompiles, explained, when the size changes.
The TP=4 run on the 4-chip cluster is in test_shapes_cluster.py (one cluster for both models).
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

from tpu_lab.models import clips  # noqa: E402

ARTIFACTS = Path(__file__).parent / "artifacts"
MIN_HONOURED = 0.80
#: Of 100 random clips, how many the VAE's reconstructions must keep judged right (measured: 95
#: with the decoder tuned on clips, 90 with the image model's).
RECONSTRUCTED_MIN = 90


def _seed(n: int = 0) -> torch.Generator:
    return torch.Generator("cpu").manual_seed(n)


def _prompts(n: int, seed: int = 1234) -> list[str]:
    rng = random.Random(seed)
    return [world.clip_caption(world.sample_clip(rng)) for _ in range(n)]


@pytest.fixture(scope="module")
def pipe():
    p = clips.clips_pipeline()
    p.set_progress_bar_config(disable=True)
    return p


def _call(**kwargs) -> dict:
    """LattePipeline's arguments for this model (``clips.GUIDANCE`` unless given)."""
    return {"guidance_scale": clips.GUIDANCE, **clips.CALL, **kwargs}


def test_shipped_folder_is_a_small_latte_pipeline():
    index = json.loads((clips.FOLDER / "model_index.json").read_text())
    assert index["_class_name"] == "LattePipeline"
    assert index["transformer"] == ["diffusers", "LatteTransformer3DModel"]
    assert index["vae"] == ["diffusers", "AutoencoderKL"]
    assert index["text_encoder"] == ["transformers", "T5EncoderModel"]
    assert index["scheduler"] == ["diffusers", "UniPCMultistepScheduler"]
    scheduler = json.loads((clips.FOLDER / "scheduler" / "scheduler_config.json").read_text())
    assert {k: scheduler[k] for k in clips.SCHEDULER_CONFIG} == clips.SCHEDULER_CONFIG
    size = sum(f.stat().st_size for f in clips.FOLDER.rglob("*.safetensors"))
    assert size < 10 * 2**20, size  # 8.2 MB transformer, 1.0 MB VAE, 0.3 MB text encoder


def test_the_vae_encodes_as_the_image_models_and_its_decoder_was_tuned_on_clips():
    """The encoder is the image model's, byte for byte (the latents the transformer learned);
    the decoder differs, and ``training.json`` records the run that tuned it."""
    from safetensors.torch import load_file

    from tpu_lab.models import shapes

    name = "vae/diffusion_pytorch_model.safetensors"
    ours, theirs = load_file(clips.FOLDER / name), load_file(shapes.FOLDER / name)
    assert ours.keys() == theirs.keys()
    decoder = {k for k in ours if k.startswith(("decoder.", "post_quant_conv."))}
    assert all(torch.equal(ours[k], theirs[k]) for k in ours.keys() - decoder)
    assert any(not torch.equal(ours[k], theirs[k]) for k in decoder)
    record = json.loads((clips.FOLDER / "training.json").read_text())
    tuned = [run["decoder"] for run in (*record["runs"], record) if run.get("decoder")]
    assert len(tuned) == 1 and tuned[0]["steps"] > 0


def test_loads_offline_and_the_tp_class_adds_only_the_plan(monkeypatch):
    from diffusers import LattePipeline, LatteTransformer3DModel

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    pipe = LattePipeline.from_pretrained(clips.FOLDER)
    assert LatteTransformer3DModel._tp_plan is None  # Diffusers ships none for Latte
    tp = clips.LatteTransformerTP.from_pretrained(clips.FOLDER, subfolder="transformer")
    assert isinstance(tp, LatteTransformer3DModel) and tp._tp_plan == clips.TP_PLAN
    theirs, ours = pipe.transformer.state_dict(), tp.state_dict()
    assert theirs.keys() == ours.keys()
    assert all(torch.equal(theirs[k], ours[k]) for k in theirs)


def test_the_plan_shards_every_feed_forward_by_four():
    from tpu_lab.sharding.plan import plan_layout

    model = clips.LatteTransformerTP(**clips.TRANSFORMER_CONFIG)
    layout = plan_layout(model, 4)
    sharded = {e.name for e in layout.entries if "Shard" in e.placement}
    layers = clips.TRANSFORMER_CONFIG["num_layers"]
    assert sharded == {f"{b}.{i}.ff.{p}.{w}" for b in ("transformer_blocks",
                                                        "temporal_transformer_blocks")
                       for i in range(layers) for p in ("net.0.proj", "net.2")
                       for w in ("weight", "bias") if not (p == "net.2" and w == "bias")}  # fmt: skip


def _clips(n: int, seed: int = 99) -> tuple[torch.Tensor, list[str]]:
    """``n`` rendered clips, ``(n, T, 3, 32, 32)`` in [-1, 1], and their captions."""
    rng = random.Random(seed)
    drawn = [world.sample_clip(rng) for _ in range(n)]
    pixels = np.stack([world.render_clip(c) for c in drawn])
    return (torch.from_numpy(pixels).permute(0, 1, 4, 2, 3).float() / 127.5 - 1,
            [world.clip_caption(c) for c in drawn])  # fmt: skip


def test_the_vae_reconstructs_what_the_judge_checks(pipe):
    """The ceiling the VAE sets: its reconstructions of 100 random clips, frame by frame as
    LattePipeline decodes them, judged (95 of 100; 90 with the image model's decoder)."""
    videos, captions = _clips(100)
    vae = pipe.vae
    with torch.no_grad():
        frames = videos.flatten(0, 1).to(vae.device)
        out = torch.cat([vae.decode(vae.encode(f).latent_dist.mode()).sample
                         for f in frames.split(200)]).cpu()  # fmt: skip
    pixels = ((out.reshape(videos.shape).permute(0, 1, 3, 4, 2) + 1) / 2).numpy()
    passed = sum(bool(world.judge_clip(p, c)) for p, c in zip(pixels, captions, strict=True))
    print(f"judge on the VAE's reconstructions: {passed} of 100")
    assert passed >= RECONSTRUCTED_MIN


@pytest.fixture(scope="module")
def hundred(pipe):
    """100 random prompts (seed 1234) and the model's clips of them, as uint8."""
    prompts, videos = _prompts(100), []
    for i in range(0, 100, 25):
        videos.append(pipe(prompts[i : i + 25], num_inference_steps=clips.STEPS,
                           generator=_seed(i), output_type="np", **_call()).frames)  # fmt: skip
    videos = np.concatenate(videos)
    _save_grid(videos[:10])
    return prompts, (videos * 255).round().astype(np.uint8)


def test_clips_have_the_frames_and_the_colours(hundred):
    """What the shipped weights (275 minutes of training) do know, measured: the right
    background at the start on 100 of 100 clips; the requested colour on 12+ pixels of the
    first frame on 92."""
    prompts, videos = hundred
    assert videos.shape == (100, clips.FRAMES, 32, 32, 3)
    background = colour = 0
    for prompt, video in zip(prompts, videos, strict=True):
        request = world.parse(prompt)
        background += world.background_of(video[0]) == request.background
        index = world.classify(video[0])
        colour += (index == list(world.COLOURS).index(request.objects[0][0])).sum() >= 12
    print(f"background right {background}/100, requested colour present {colour}/100")
    assert background >= 90 and colour >= 70


def test_honours_80_percent_of_100_random_prompts(hundred):
    """Measured: 84 of 100 (the transformer's 275 minutes of training, then 10 minutes of the
    VAE's decoder on the clips' frames; 79 with the image model's decoder); the misses, by kind:
    10 objects lost at the start or the end, 6 shapes read as another."""
    prompts, videos = hundred
    verdicts = [world.judge_clip(v, p) for v, p in zip(videos, prompts, strict=True)]
    score = float(np.mean([bool(v) for v in verdicts]))
    print(f"judge: {score:.2f} of 100 prompts honoured")
    for failure, count in world.misses_by_kind(verdicts).most_common():
        print(f"  {count:3d} x {failure}")
    assert score >= MIN_HONOURED


def test_the_direction_word_decides_which_way_the_object_moves(pipe):
    """``clips.follows_direction``: prompts that differ only in the direction word, each
    object's four from the same noise; the object should travel 6+ pixels the way each word says
    (the judge's test of motion). The Wan model before this one moved it the way its noise
    leaned (8 of 16). Printed beside it, ``clips.follows_the_noise`` (where the noise mirrored
    makes the clip mirrored, the start comes from the noise, not the word: 7 of 8 for Wan) and
    ``clips.direction_weight``."""
    followed = clips.follows_direction(pipe)
    print(f"16 clips, 4 objects x 4 direction words: {followed}")
    noise = clips.follows_the_noise(pipe)
    print(f"8 moving prompts from noise and mirrored noise, 4 growing from noise and reversed "
          f"noise: {noise}")
    print(f"the direction word's weight on the prediction from noise, %: "
          f"{clips.direction_weight(pipe)}")
    prompts = [f"a large red circle {d} on a black background" for d in world.TRAVEL]
    with torch.no_grad():
        states = pipe.encode_prompt(prompts, do_classifier_free_guidance=False,
                                    clean_caption=False)[0]  # fmt: skip
    for a, b in ((0, 1), (2, 3), (1, 2)):  # left/right, up/down, right/up
        apart = (states[a] - states[b]).norm() / states[b].norm()
        print(f"text states of {prompts[a]!r} and {prompts[b]!r}: {apart:.1%} apart")
    assert followed["the word's way"] >= 14, followed
    assert noise["mirrored with the noise"] <= 2, noise  # the word, not the noise, picks the side


def _save_grid(videos: np.ndarray, every: int = 4) -> None:
    """One row per clip: every ``every``-th frame."""
    from PIL import Image

    ARTIFACTS.mkdir(exist_ok=True)
    frames = np.pad(videos[:, ::every], ((0, 0), (0, 0), (1, 1), (1, 1), (0, 0)),
                    constant_values=1)  # fmt: skip
    rows = [np.concatenate(list(clip), axis=1) for clip in frames]
    picture = Image.fromarray((np.concatenate(rows) * 255).round().astype(np.uint8))
    picture.resize((picture.width * 4, picture.height * 4), Image.Resampling.NEAREST).save(
        ARTIFACTS / "clips_grid.png"
    )


def test_tpu_matches_cpu(pipe):
    cpu = clips.clips_pipeline(device="cpu")
    cpu.set_progress_bar_config(disable=True)
    kwargs = {"prompt": _prompts(2), "num_inference_steps": 3, "output_type": "pt", **_call()}
    on_tpu = pipe(generator=_seed(1), **kwargs).frames
    on_cpu = cpu(generator=_seed(1), **kwargs).frames
    torch.testing.assert_close(on_tpu.cpu(), on_cpu.cpu(), atol=1e-6, rtol=0)


def test_guidance_runs_the_empty_prompt_too(pipe):
    kwargs = {"prompt": _prompts(1), "num_inference_steps": 2, "output_type": "pt",
              **_call(guidance_scale=1.0)}  # fmt: skip
    plain = pipe(generator=_seed(2), **kwargs).frames
    guided = pipe(generator=_seed(2), **{**kwargs, "negative_prompt": "", "guidance_scale": 3.0}
                  ).frames  # fmt: skip
    assert not torch.equal(plain.cpu(), guided.cpu())


def test_compiled_transformer_compiles_once_per_size_and_explains_the_recompile(
    pipe, fresh_dynamo, use_lowering
):
    import copy

    from diffusers import LattePipeline

    from tpu_lab.events import log

    use_lowering("aten")
    kwargs = {"prompt": _prompts(2), "num_inference_steps": 3, "output_type": "pt",
              **_call()}  # fmt: skip
    eager = pipe(generator=_seed(3), **kwargs).frames
    transformer = copy.copy(pipe.transformer)
    transformer.compile(backend="tpu", fullgraph=True, dynamic=False)  # the announcement's way
    compiled = LattePipeline(**{**pipe.components, "transformer": transformer})
    compiled.set_progress_bar_config(disable=True)

    def events(run):
        start = log.events()[-1].seq if log.events() else 0
        result = run()
        return result, [e for e in log.events() if e.seq > start and "compile" in e.kind]

    frames, first = events(lambda: compiled(generator=_seed(3), **kwargs).frames)
    assert [e.kind for e in first] == ["compile"]  # once for all 3 steps
    torch.testing.assert_close(frames.cpu(), eager.cpu(), atol=1e-4, rtol=0)
    _, again = events(lambda: compiled(generator=_seed(4), **kwargs))
    assert again == []
    _, resized = events(lambda: compiled(generator=_seed(3), **{**kwargs, "height": 48,
                                                                 "width": 48}))  # fmt: skip
    assert [e.kind for e in resized] == ["recompile"]
    # 32x32 pixels are 8x8 latents, 4x4 tokens (2x2 patches) per frame; 48x48 are 12x12, 6x6
    assert "changed from 8 to 12" in resized[0].summary, resized[0].summary


def test_missing_folder_says_what_to_pass(tmp_path):
    with pytest.raises(tpu_lab.ShapesModelError, match="is not a diffusers pipeline folder"):
        clips.clips_pipeline(path=tmp_path)
