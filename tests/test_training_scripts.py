"""The training scripts of the embedded pipelines, run as a user runs them, for a few seconds:
``scripts/train_shapes.py`` (FluxPipeline) and ``scripts/train_clips.py`` (LattePipeline) train
on the "tpu" device, save a folder that ``from_pretrained`` loads, judge it, and ``--resume``
continues from it with every run on record; for the image model, ``--vae-from`` starts a fresh
transformer on a saved VAE and ``--decoder-minutes`` trains that VAE's decoder further without
touching its encoder (the video model starts from the image model's VAE, and ``--resume
--decoder-minutes`` tunes its decoder on the clips' frames); bad arguments are refused before any
work. ``scripts/tune_clips.py`` judges a grid of the video model's sampling
settings."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors.torch import load_file

ROOT = Path(__file__).resolve().parents[1]

#: Per script: its data option and a small count (the default draws thousands), and the image
#: model's VAE stage, seconds too (the video model has none: it starts from the image model's).
SCRIPTS = {"train_shapes.py": ("--scenes", "64", "--vae-minutes", "0.05"),
           "train_clips.py": ("--clips", "16")}  # fmt: skip


def _train(script: str, out: Path, *extra: str) -> subprocess.CompletedProcess:
    argv = [sys.executable, str(ROOT / "scripts" / script), *SCRIPTS[script], "--minutes", "0.05",
            "--prompts", "2", "--threads", "1", "--out", str(out), *extra]  # fmt: skip
    return subprocess.run(argv, capture_output=True, text=True, timeout=600, cwd=ROOT)


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_trains_saves_judges_and_resumes(script, tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    run = _train(script, first)
    assert run.returncode == 0, run.stderr[-3000:]
    record = json.loads((first / "training.json").read_text())
    assert record["device"] == "tpu" and record["steps"] > 0 and record["runs"] == []
    scores = record["judge_2_prompts_by_guidance"]
    assert scores and all(0.0 <= s <= 1.0 for s in scores.values())
    assert "judge at guidance" in run.stdout
    vae = record.get("vae", {"seconds": 0.0})  # the image model's VAE stage (fresh starts)
    if script == "train_shapes.py":
        assert vae["steps"] > 0 and 0.0 <= vae["judge_100_reconstructions"] <= 1.0

    run = _train(script, second, "--resume", str(first))
    assert run.returncode == 0, run.stderr[-3000:]
    assert f"resuming {first}" in run.stdout
    again = json.loads((second / "training.json").read_text())
    assert [r["seconds"] for r in again["runs"]] == [record["seconds"]]
    assert "vae" not in again  # a resumed run trains the transformer, not the VAE
    spent = record["seconds"] + vae["seconds"] + again["seconds"]  # the VAE's included
    assert again["total_seconds"] == pytest.approx(spent, abs=0.2)
    weights = "transformer/diffusion_pytorch_model.safetensors"
    before, after = load_file(first / weights), load_file(second / weights)
    assert before.keys() == after.keys()
    assert any(not before[k].equal(after[k]) for k in before), "--resume trained nothing"
    weights = "vae/diffusion_pytorch_model.safetensors"
    before, after = load_file(first / weights), load_file(second / weights)
    assert all(before[k].equal(after[k]) for k in before)
    for config in second.glob("*/config.json"):  # nothing of the training machine's folders
        assert "_name_or_path" not in json.loads(config.read_text()), config


def _encoder_and_decoder(folder: Path) -> tuple[dict, dict]:
    weights = load_file(folder / "vae" / "diffusion_pytorch_model.safetensors")
    decoder = {k: v for k, v in weights.items() if k.startswith(("decoder.", "post_quant_conv."))}
    return {k: v for k, v in weights.items() if k not in decoder}, decoder


def test_clips_start_from_the_image_models_vae_and_text_encoder(tmp_path):
    """A fresh video model: the embedded image model's VAE, unchanged, and its T5 as the text
    encoder's start (after a few steps nearer it than a fresh T5 is); the direction word's weight
    on record before and after; a resumed run with ``--high-noise`` and ``--decoder-minutes``
    records both, and its VAE keeps the encoder (so the latents) and has a trained decoder."""
    from transformers import T5Config, T5EncoderModel

    from tpu_lab.models import shapes

    first, second = tmp_path / "first", tmp_path / "second"
    run = _train("train_clips.py", first)
    assert run.returncode == 0, run.stderr[-3000:]
    assert " x " in run.stdout  # the misses by kind (2 prompts after seconds of training)
    record = json.loads((first / "training.json").read_text())
    assert set(record["word_weight_percent"]["after"]) == {"right/left", "right/up"}
    weights = "vae/diffusion_pytorch_model.safetensors"
    ours, theirs = load_file(first / weights), load_file(shapes.FOLDER / weights)
    assert all(ours[k].equal(theirs[k]) for k in theirs)
    new = load_file(first / "text_encoder" / "model.safetensors")
    image = load_file(shapes.FOLDER / "text_encoder_2" / "model.safetensors")
    fresh = T5EncoderModel(T5Config(vocab_size=len(shapes.build_tokenizer()),
                                    **shapes.T5_CONFIG)).state_dict()  # fmt: skip

    def apart(a: dict, b: dict) -> float:
        return sum(float((a[k] - b[k]).norm()) for k in new)

    assert new.keys() == image.keys() and apart(new, image) < apart(new, fresh) / 10
    run = _train("train_clips.py", second, "--resume", str(first), "--high-noise", "0.5",
                 "--decoder-minutes", "0.05", "--decoder-noise", "0.3")  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    assert "decoder: the judge passes" in run.stdout
    resumed = json.loads((second / "training.json").read_text())
    assert resumed["high_noise"] == 0.5 and "high_noise" not in record
    assert resumed["word_weight_percent"]["before"] == record["word_weight_percent"]["after"]
    tuned = resumed["decoder"]
    assert tuned["steps"] > 0 and 0.0 <= tuned["judge_100_reconstructions"] <= 1.0
    assert tuned["noise"] == 0.3
    spent = record["seconds"] + resumed["seconds"] + tuned["seconds"]
    assert resumed["total_seconds"] == pytest.approx(spent, abs=0.2)
    (encoder, decoder), (encoder2, decoder2) = map(_encoder_and_decoder, (first, second))
    assert all(encoder[k].equal(encoder2[k]) for k in encoder), "the encoder moved"
    assert any(not decoder[k].equal(decoder2[k]) for k in decoder), "the decoder did not train"


def _tune(*extra: str) -> subprocess.CompletedProcess:
    argv = [sys.executable, str(ROOT / "scripts" / "tune_clips.py"), "--threads", "1", *extra]
    return subprocess.run(argv, capture_output=True, text=True, timeout=600, cwd=ROOT)


def test_tune_clips_judges_a_grid_of_settings_on_other_prompts_than_the_tests(tmp_path):
    """``scripts/tune_clips.py`` on the shipped model, 2 prompts of 2 seeds per cell: a table of
    guidance by shift, each cell the prompts honoured of 4, and the best and shipped settings;
    the tests' own prompt set and bad values are refused with the reason."""
    run = _tune("--prompts", "2", "--steps", "2", "--guidance", "1", "2", "--shift", "1", "3",
                "--seeds", "1", "2")  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    table = run.stdout.split("prompts honoured of 4", 1)[1].splitlines()
    assert table[1].split() == ["guidance", "shift", "1", "shift", "3"]
    rows = {float(line.split()[0]): [int(c) for c in line.split()[1:]] for line in table[2:4]}
    assert set(rows) == {1.0, 2.0} and all(0 <= c <= 4 for r in rows.values() for c in r)
    assert "best: guidance" in run.stdout and "shipped: guidance" in run.stdout
    for argv, reason in (((str(tmp_path),), "no model_index.json"),
                         (("--seeds", "1234"), "tune on other seeds"),
                         (("--guidance", "0.5"), "not classifier-free guidance"),
                         (("--shift", "0"), "must be above 0"),
                         (("--prompts", "0"), "at least 1")):  # fmt: skip
        run = _tune(*argv)
        assert run.returncode == 2 and reason in run.stderr, (argv, run.stderr[-500:])


@pytest.mark.parametrize("script", ["train_shapes.py"])
def test_a_fresh_transformer_on_a_saved_vae_with_its_decoder_tuned(script, tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    assert _train(script, first).returncode == 0
    record = json.loads((first / "training.json").read_text())

    run = _train(script, second, "--vae-from", str(first), "--decoder-minutes", "0.05")
    assert run.returncode == 0, run.stderr[-3000:]
    assert "decoder: the judge passes" in run.stdout
    again = json.loads((second / "training.json").read_text())
    assert again["runs"] == []  # a fresh transformer: no earlier transformer runs
    assert again["vae"]["from"] == str(first) and again["vae"]["steps"] == record["vae"]["steps"]
    tuned = again["decoder"]
    assert tuned["steps"] > 0 and 0.0 <= tuned["judge_100_reconstructions"] <= 1.0
    spent = again["seconds"] + record["vae"]["seconds"] + tuned["seconds"]
    assert again["total_seconds"] == pytest.approx(spent, abs=0.2)
    (encoder, decoder), (encoder2, decoder2) = map(_encoder_and_decoder, (first, second))
    assert encoder.keys() == encoder2.keys() and decoder.keys() == decoder2.keys()
    assert all(encoder[k].equal(encoder2[k]) for k in encoder), "the encoder moved"
    assert any(not decoder[k].equal(decoder2[k]) for k in decoder), "the decoder did not train"


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_bad_arguments_are_refused_with_the_reason(script, tmp_path):
    run = _train(script, tmp_path / "out", "--resume", str(tmp_path))
    assert run.returncode == 2
    assert "no model_index.json there" in run.stderr
    run = _train(script, tmp_path / "out", "--prompts", "0")
    assert run.returncode == 2 and "judge at least 1 prompt" in run.stderr
    run = _train(script, tmp_path / "out", "--resume", str(tmp_path), "--vae-from", str(tmp_path))
    assert run.returncode == 2 and "not both" in run.stderr
    run = _train(script, tmp_path / "out", "--decoder-minutes", "1")
    assert run.returncode == 2 and "give --resume or --vae-from" in run.stderr
    for noise in (("--decoder-noise", "0.3"), ("--decoder-noise", "-1", "--decoder-minutes", "1")):
        run = _train(script, tmp_path / "out", *noise)
        assert run.returncode == 2 and "give a share of 0 or more, and" in run.stderr
    run = _train(script, tmp_path / "out", "--high-noise", "1.5")
    if script == "train_clips.py":
        assert run.returncode == 2 and "give a share between 0 and 1" in run.stderr
        run = _train(script, tmp_path / "out", "--vae-from", str(ROOT / "tpu_lab/models/shapes"))
        assert run.returncode != 0 and "starts from the image model's VAE" in run.stderr
    else:
        assert run.returncode == 2 and "unrecognized arguments: --high-noise" in run.stderr
    assert not (tmp_path / "out").exists()


def test_vae_from_a_folder_tuned_twice_counts_both_tunings_and_keeps_the_latest_score(tmp_path):
    """``reused_vae`` on a folder whose decoder ``--decoder-minutes`` trained twice (two runs in
    its ``training.json``, the oldest listed first): every stage's seconds are counted and the
    reconstruction score is the latest tuning's, the one the saved decoder has."""
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        from train_shapes import reused_vae
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    from diffusers import AutoencoderKL

    from tpu_lab.models import shapes

    shapes.build_vae().save_pretrained(tmp_path / "vae")
    first = {"seconds": 30.0, "vae": {"seconds": 100.0, "steps": 7, "judge_100_reconstructions": 0.8},
             "decoder": {"seconds": 20.0, "steps": 3, "judge_100_reconstructions": 0.85}}  # fmt: skip
    latest = {"seconds": 60.0, "decoder": {"seconds": 40.0, "steps": 5,
                                           "judge_100_reconstructions": 0.9}, "runs": [first]}  # fmt: skip
    (tmp_path / "training.json").write_text(json.dumps(latest))
    vae, stage = reused_vae(tmp_path, AutoencoderKL)
    assert isinstance(vae, AutoencoderKL)
    assert stage["judge_100_reconstructions"] == 0.9
    assert stage["seconds"] == 100.0 + 20.0 + 40.0 and stage["steps"] == 7
    assert [t["seconds"] for t in stage["decoder_runs"]] == [20.0, 40.0]
    assert stage["from"] == str(tmp_path)
