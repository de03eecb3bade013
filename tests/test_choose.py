"""Which slice to rent: tpu_lab.sharding.choose, and the two ways it avoids recording a step
again (a program at another batch from two recordings, a deep model from two shallow ones),
each checked against doing the work in full."""

import dataclasses
from pathlib import Path

import pytest
import torch
from transformers import LlamaConfig

from tpu_lab.errors import ShardingError, TopologyError, TpuLabError
from tpu_lab.estimate.affine import between
from tpu_lab.hardware.chips import CHIPS
from tpu_lab.hardware.topology import GENERATIONS
from tpu_lab.sharding import choose, plan
from tpu_lab.sharding import step_estimate as steps
from tpu_lab.sharding.chooser import LEAST_RECOMPUTE, TP_DEGREES, extrapolate, slices, weigh
from tpu_lab.sharding.published_configs import config as published
from tpu_lab.views import figure, view

ARTIFACTS = Path(__file__).parent / "artifacts"

SMALL = dict(hidden_size=128, intermediate_size=256, num_hidden_layers=4,
             num_attention_heads=8, num_key_value_heads=4, vocab_size=512)
FLUX = dict(_class_name="FluxTransformer2DModel", patch_size=1, in_channels=16, num_layers=1,
            num_single_layers=1, attention_head_dim=16, num_attention_heads=4,
            joint_attention_dim=32, pooled_projection_dim=32, axes_dims_rope=(4, 6, 6))


def _recording(obj, task, batch, **step):
    p = plan(obj, chips=1, batch=batch, **step)
    return steps._record(p, task, None, "none", "adamw")


@pytest.mark.parametrize("task", ["train", "forward", "decode"])
def test_a_program_at_another_batch_is_the_recording_at_that_batch(task):
    config = LlamaConfig(**SMALL)
    two, three, seven = (_recording(config, task, b, seq=64) for b in (2, 3, 7))
    made = between(two.program, three.program, 2, 3, 7)
    assert made is not None
    assert made.records == seven.program.records  # op by op: the same signatures, same values
    assert made.values == seven.program.values and made.buffers == seven.program.buffers


def test_a_diffusion_models_program_at_another_batch_is_its_recording():
    two, three, five = (_recording(dict(FLUX), "train", b, image_size=(64, 64))
                        for b in (2, 3, 5))
    assert between(two.program, three.program, 2, 3, 5) == five.program
    one = _recording(dict(FLUX), "train", 1, image_size=(64, 64))
    # a batch of one takes another path (fewer ops): it is always recorded itself
    assert len(one.program.records) != len(two.program.records)
    assert between(two.program, three.program, 2, 3, 1) != one.program


def test_programs_that_differ_in_more_than_sizes_have_no_program_between_them():
    a = _recording(LlamaConfig(**SMALL), "forward", 2, seq=64).program
    b = _recording(LlamaConfig(**SMALL), "train", 3, seq=64).program
    assert between(a, b, 2, 3, 4) is None
    odd = _recording(LlamaConfig(**SMALL), "forward", 3, seq=64).program
    assert between(a, odd, 2, 4, 3) is None  # a batch of 3 at 4 would be 2.5 sequences
    with pytest.raises(ValueError, match="two different sizes"):
        between(a, a, 2, 2, 3)


def test_estimates_reuse_recordings_and_make_other_batches_from_three():
    steps.forget()
    config = LlamaConfig(**SMALL)
    made = {b: plan(config, chips=2, fsdp=2, batch=2 * b, seq=64).estimate("train")
            for b in (1, 2, 3, 5, 8, 13)}
    families = list(steps._FAMILIES.values())
    assert len(families) == 1 and families[0].affine and sorted(families[0].samples) == [2, 3, 5]
    steps.forget()
    for b in (8, 13):  # recorded afresh, at that batch
        assert plan(config, chips=2, fsdp=2, batch=2 * b, seq=64).estimate("train") == made[b]


@pytest.mark.parametrize(("task", "remat", "tp", "fsdp"), [
    ("train", "none", 1, 1), ("train", "full", 2, 2), ("train", "dots", 1, 4),
    ("forward", "none", 4, 1), ("decode", "none", 2, 1)])
def test_a_deep_model_from_one_and_two_layers_is_the_whole_model(task, remat, tp, fsdp):
    config = LlamaConfig(**dict(SMALL, num_hidden_layers=6))

    def estimate(layers):
        c = LlamaConfig(**dict(SMALL, num_hidden_layers=layers))
        return plan(c, chips=tp, fsdp=fsdp, batch=4 * fsdp, seq=128, remat=remat).estimate(task)

    whole = plan(config, chips=tp, fsdp=fsdp, batch=4 * fsdp, seq=128, remat=remat
                 ).estimate(task)
    made = extrapolate(estimate(1), estimate(2), 6, 1, whole.title)
    for field in ("seconds", "expected_seconds", "flops", "hbm_bytes", "ici_bytes"):
        assert getattr(made, field) == pytest.approx(getattr(whole, field), rel=1e-9), field
    assert made.memory.peak_bytes == pytest.approx(whole.memory.peak_bytes, rel=1e-9)
    assert dict(made.memory.breakdown) == pytest.approx(dict(whole.memory.breakdown), rel=1e-9)
    assert made.bound == whole.bound


@pytest.fixture
def small_hbm(monkeypatch):
    """v5e and v6e chips with a few MiB of HBM, so that a small model fits some splits only."""
    for name, mib in (("v5e", 24), ("v6e", 12)):
        monkeypatch.setitem(CHIPS, name, dataclasses.replace(CHIPS[name], hbm_bytes=mib << 20))


def _every_split(config, batch, seq, generations, max_chips):
    """What choose() should find, found the long way: every split of every slice estimated on
    the whole model with each remat, least recomputation first."""
    from tpu_lab.sharding.chooser import _slices

    found = {}
    for g in generations:
        for devices, hosts in _slices(g, max_chips):
            for tp in TP_DEGREES:
                if tp > devices // hosts or devices % tp or batch % (devices // tp):
                    continue
                fsdp = devices // tp
                try:
                    p = plan(config, chips=tp, fsdp=fsdp, batch=batch, seq=seq, generation=g,
                             dtype=torch.bfloat16)
                except ShardingError:  # the heads do not split over tp chips
                    continue
                for r in LEAST_RECOMPUTE:
                    e = p.estimate("train", remat=r)
                    if e.fits:
                        found[g, devices, tp] = (r, e)
                        break
    return found


def test_choose_finds_what_estimating_every_split_finds(small_hbm):
    config = LlamaConfig(**SMALL)
    got = choose(config, "train", batch=16, seq=256, generations=("v5e", "v6e"), max_chips=16)
    want = _every_split(config, 16, 256, ("v5e", "v6e"), 16)
    assert {(o.generation, o.devices, o.tp): o.remat for o in got.options} == {
        k: r for k, (r, _) in want.items()}
    assert {r for r, _ in want.values()} == set(LEAST_RECOMPUTE)  # the test reaches each remat
    for o in got.options:
        e = want[o.generation, o.devices, o.tp][1]
        assert o.seconds == pytest.approx(e.expected_seconds, rel=1e-9)
        assert o.estimate.peak_hbm_bytes == pytest.approx(e.peak_hbm_bytes, rel=1e-9)
    assert got.estimated < got.considered  # a peak seen once decides the other generation
    assert [o.seconds for o in got.options] == sorted(o.seconds for o in got.options)


def test_the_pareto_front_is_what_nothing_beats_on_both_time_and_price(small_hbm):
    got = choose(LlamaConfig(**SMALL), "train", batch=16, seq=256, generations=("v5e", "v6e"),
                 max_chips=16)
    priced = [o for o in got.options if o.usd_per_step is not None]

    def beaten(o):
        return any(p.seconds <= o.seconds and p.usd_per_step <= o.usd_per_step and (
            p.seconds, p.usd_per_step) != (o.seconds, o.usd_per_step) for p in priced)

    assert set(got.pareto) == {o for o in priced if not beaten(o)}
    assert got.pareto and [o.usd_per_step for o in got.by_cost[:1]] == [
        min(o.usd_per_step for o in priced)]


def test_llama_70b_training_has_options_on_three_generations_and_its_first_choice_fits():
    got = choose(published("llama-3.1-70b"), "train", batch=256, seq=8192)
    assert len({o.generation for o in got.options}) >= 3
    assert got.best.fits and got.best.seconds == min(o.seconds for o in got.options)
    assert got.considered >= 100
    for o in got.options:
        assert o.estimate.peak_hbm_bytes <= GENERATIONS[o.generation].hbm_per_device
        assert o.remat != "none"  # 70B at 8192 tokens a sequence needs its activations dropped
    assert any(o.usd_per_step for o in got.options)
    text = view(got).to_text()
    assert got.best.slice_name in text and "list price" in text
    ARTIFACTS.mkdir(exist_ok=True)  # the picture of docs/estimates.md
    figure(got).savefig(ARTIFACTS / "choose-llama-70b.png")


def test_choose_refuses_what_it_cannot_search_with_the_fix():
    config = LlamaConfig(**SMALL)
    with pytest.raises(TopologyError, match="Unknown TPU generation 'v9'"):
        choose(config, batch=8, seq=64, generations=("v9",))
    with pytest.raises(ShardingError, match="max_chips must be a positive whole number"):
        choose(config, batch=8, seq=64, max_chips=0)
    with pytest.raises(ShardingError, match="remat"):
        choose(config, batch=8, seq=64, remat="some")
    with pytest.raises(TpuLabError, match="commitment must be one of"):
        choose(config, batch=8, seq=64, commitment="forever")
    with pytest.raises(ShardingError, match="task must be one of"):
        choose(config, "serve", batch=8, seq=64)


def test_nothing_fits_says_so_and_what_to_try():
    got = choose(published("llama-3.1-70b"), "train", batch=8, seq=8192, generations=("v5e",),
                 max_chips=4)
    assert got.options == () and got.best is None
    assert "Nothing fits" in view(got).to_text()


def test_inference_splits_the_batch_over_replicas():
    got = choose(LlamaConfig(**SMALL), "decode", batch=8, seq=256, generations=("v6e",),
                 max_chips=8, dtype=torch.bfloat16)
    assert got.options and all(o.remat == "none" and o.fsdp == 1 for o in got.options)
    assert {o.data for o in got.options} > {1}


def test_weigh_is_one_option_as_choose_weighs_it_and_refuses_a_split_with_the_fix(small_hbm):
    config = LlamaConfig(**SMALL)
    got = choose(config, "train", batch=16, seq=256, generations=("v5e", "v6e"), max_chips=16)
    for o in got.options[:4]:
        same = weigh(config, generation=o.generation, devices=o.devices, tp=o.tp, batch=16,
                     seq=256, remat=o.remat)
        assert (same.slice_name, same.parallelism, same.fits) == (o.slice_name, o.parallelism, True)
        assert same.seconds == pytest.approx(o.seconds, rel=1e-12)
    assert slices("v6e", 16) == (1, 4, 8, 16) and slices("v7", 4) == (2, 4, 8)
    with pytest.raises(TopologyError, match="no slice of 6 devices; its slices: 1, 4, 8"):
        weigh(config, generation="v6e", devices=6, batch=6, seq=64)
    with pytest.raises(ShardingError, match="try tp 1, 2, 4, 8"):
        weigh(config, generation="v6e", devices=8, tp=3, batch=8, seq=64)
    with pytest.raises(ShardingError, match="multiple of the 8 FSDP chips .* got 3, try 8"):
        weigh(config, generation="v6e", devices=8, batch=3, seq=64)


def test_a_run_priced_on_the_fastest_and_the_cheapest_names_each_once():
    one = choose(LlamaConfig(**SMALL), "train", batch=8, seq=128, generations=("v6e",),
                 max_chips=1, tokens=1e6)
    assert one.best is one.by_cost[0]
    run = next(line for line in view(one).to_text().splitlines() if line.startswith("a run of"))
    assert run.count(" on v6e-1 ") == 1 and run.startswith("a run of 1M tokens: $")
    assert str(one) == view(one).to_text()  # print(choice) shows the table, repr() the data
    assert repr(one).startswith("Choice(")
    both = choose(LlamaConfig(**SMALL), "train", batch=8, seq=128, generations=("v6e", "v7"),
                  max_chips=8, tokens=1e6)
    assert both.best is not both.by_cost[0]  # v7 is faster, v6e has a price
    run = next(line for line in view(both).to_text().splitlines() if line.startswith("a run of"))
    assert f"on {both.best.slice_name} (" in run and f"on {both.by_cost[0].slice_name} (" in run
    assert " h)" not in run  # a run of minutes reads in seconds, not 1.8e-05 h
