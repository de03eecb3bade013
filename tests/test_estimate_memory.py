"""Peak HBM from the traced step (tpu_lab.estimate.memory, Plan.estimate(...).memory), checked
against the bundled device's own measurement of the same step (measure_peak: the step run for
real, torch.accelerator.max_memory_allocated()): a zoo of tiny models, each task, bfloat16 and
float32, activation checkpointing; the lifetime rules on hand-built programs; the largest
batch; bad input."""

from __future__ import annotations

import dataclasses
import sys
import warnings
from pathlib import Path

import pytest
import torch

import tpu_lab  # noqa: F401  (the "tpu" device)
from tpu_lab.errors import ShardingError
from tpu_lab.estimate.memory import Span, classify, compiled_lives, eager_lives, peak
from tpu_lab.estimate.trace import Recorder
from tpu_lab.sharding import plan
from tpu_lab.sharding.step_estimate import measure_peak

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
from check_memory import CASES, ZOO, zoo_plan  # noqa: E402  (the zoo of the docs' table)

_plan = zoo_plan


@pytest.mark.parametrize(("name", "dtype", "task"), CASES,
                         ids=[f"{n}-{str(d)[6:]}-{t}" for n, d, t in CASES])
def test_the_eager_peak_is_what_the_bundled_device_measures(name, dtype, task):
    p = _plan(name, dtype)
    predicted = p.estimate(task, mode="eager").peak_hbm_bytes
    measured = measure_peak(p, task)
    assert predicted == pytest.approx(measured, rel=0.05)


@pytest.mark.parametrize(("name", "remat"), [("llama", "full"), ("llama", "dots"),
                                              ("unet", "full"), ("flux", "dots")])
def test_remat_is_what_a_checkpointed_run_measures(name, remat):
    p = _plan(name, remat=remat)
    checkpointed = p.estimate("train", mode="eager")
    assert checkpointed.peak_hbm_bytes == pytest.approx(measure_peak(p, "train"), rel=0.10)
    plain = p.estimate("train", mode="eager", remat="none")
    assert checkpointed.peak_hbm_bytes <= plain.peak_hbm_bytes
    if remat == "full":  # the forward runs again in the backward
        assert checkpointed.flops > plain.flops
    else:  # "dots" recomputes what is not a matmul: no FLOPs, some HBM traffic
        assert checkpointed.flops == plain.flops and checkpointed.hbm_bytes > plain.hbm_bytes


def test_full_remat_keeps_only_each_blocks_input_for_the_backward():
    config = ZOO["llama"]()
    config.num_hidden_layers = 4
    kept = {remat: plan(config, chips=1, batch=8, seq=128, dtype=torch.bfloat16, remat=remat)
            .estimate("train", mode="eager").memory.of("activations saved for backward")
            for remat in ("none", "dots", "full")}
    assert kept["full"] < kept["dots"] < kept["none"]


def test_what_fills_hbm_adds_up_to_the_peak_and_names_the_step():
    e = _plan("llama").estimate("train", mode="eager")
    memory = e.memory
    assert sum(n for _, n in memory.breakdown) == pytest.approx(memory.peak_bytes)
    kinds = dict(memory.breakdown)
    weights = sum(p.numel() * 2 for p in torch.nn.Module.parameters(
        _meta_llama()))  # bf16 weights
    assert kinds["weights"] == pytest.approx(weights, rel=0.01)
    assert kinds["optimizer state"] == pytest.approx(2 * kinds["weights"], rel=0.01)  # AdamW
    assert e.task == "train" and e.verdict.startswith("fits in HBM: peak ")
    sgd = _plan("llama", optimizer="sgd").estimate("train", mode="eager").memory
    assert sgd.of("optimizer state") == pytest.approx(kinds["weights"], rel=0.01)  # momentum
    decode = _plan("llama").estimate("decode", mode="eager").memory
    assert decode.of("KV cache") == 2 * 2 * 2 * 64 * 2 * 16 * 2  # k, v x layers x b x s x kv x d


def _meta_llama():
    from transformers import LlamaForCausalLM

    with torch.device("meta"):
        return LlamaForCausalLM(ZOO["llama"]())


def _chain(x):
    y = x * 2
    z = y + 1
    return z.relu().sum()


def test_eager_lives_end_when_the_last_tensor_goes_and_compiled_at_the_last_use():
    x = torch.empty(1024, device="meta")
    rec = Recorder()
    rec.hold(x, "inputs")
    with rec:
        _chain(x)
    program = rec.program
    # eager: y, z live until _chain returns; the relu's result until the sum is taken
    assert [(b.made, b.freed) for b in program.buffers] == [
        (-1, None), (0, 4), (1, 4), (2, 4), (3, 4)]
    classify(program, None)
    eager = peak(program, eager_lives(program), "eager")
    assert eager.peak_bytes == 4 * 4096 + 4 and eager.at == "aten.sum"  # the sum's scalar too
    assert eager.breakdown == (("temporaries", 3 * 4096 + 4), ("inputs", 4096))

    class NothingFuses:
        def materialized(self, v):
            return True

    compiled = peak(program, compiled_lives(program, NothingFuses()), "compiled")
    assert compiled.peak_bytes == 3 * 4096  # each value freed after its last use
    spans = peak(program, eager_lives(program), "eager", spans=(Span(0, 1, 1000.0),))
    assert spans.peak_bytes == 4 * 4096 + 4  # the span ends before the peak
    assert peak(program, eager_lives(program), "eager",
                spans=(Span(2, 3, 1000.0),)).peak_bytes == 4 * 4096 + 4 + 1000


def test_a_compiled_step_keeps_a_fusions_intermediates_on_chip():
    p = _plan("llama")
    eager = p.estimate("forward", mode="eager")
    compiled = p.estimate("forward", mode="compiled")
    assert compiled.peak_hbm_bytes < eager.peak_hbm_bytes
    assert compiled.memory.of("weights") == eager.memory.of("weights")


def test_tensor_parallel_and_fsdp_shares_of_the_peak():
    config = ZOO["llama"]()
    config.num_key_value_heads = 4
    whole = plan(config, chips=1, batch=4, seq=64, dtype=torch.bfloat16).estimate("train")
    two = plan(config, chips=2, batch=4, seq=64, dtype=torch.bfloat16).estimate("train")
    assert two.memory.of("weights") < 0.6 * whole.memory.of("weights")
    assert two.peak_hbm_bytes < whole.peak_hbm_bytes
    sharded = plan(config, chips=1, fsdp=4, batch=16, seq=64,
                   dtype=torch.bfloat16).estimate("train").memory  # 4 sequences per chip
    for kind in ("weights", "optimizer state"):
        assert sharded.of(kind) == pytest.approx(whole.memory.of(kind) / 4, rel=0.01)


def test_max_batch_fits_and_one_more_step_does_not():
    p = plan(ZOO["llama"](), chips=1, generation="v5e", seq=64, dtype=torch.bfloat16)
    limits = p.max_batch("train", remat="none", limit=1 << 20)
    (row,) = limits.rows
    assert row.fits and row.estimate.fits and not row.at_limit
    more = dataclasses.replace(p, batch=row.batch + 1)
    assert not more.estimate("train").fits
    assert row.estimate.peak_hbm_bytes <= 16 << 30
    everyone = p.max_batch("forward", limit=64)
    assert [r.remat for r in everyone.rows] == ["none"] and everyone.rows[0].batch == 64
    assert everyone.rows[0].at_limit


def test_convolutional_models_train_with_the_flop_counters_count():
    from _counted import counter
    from tpu_lab.sharding.meta_run import FusedAttention
    from tpu_lab.sharding.step_estimate import make_optimizer, run_step, step_model
    from tpu_lab.sharding.step_inputs import diffusion_step

    p = _plan("unet", torch.float32, optimizer="sgd")
    estimate = p.estimate("train", mode="eager")
    model = step_model(p.obj, torch.float32)
    step = diffusion_step(model, 2, torch.float32, (64, 64), None, None)
    optimizer = make_optimizer("sgd", list(model.parameters()))
    with FusedAttention(), counter() as counted:
        run_step(model, step, "train", optimizer)
    assert estimate.flops == counted.get_total_flops()


@pytest.mark.parametrize(("options", "message"), [
    (dict(batch=0, seq=64), "batch must be a positive whole number, got 0: sequences"),
    (dict(batch=2, seq=-5), "seq must be a positive whole number, got -5: tokens per"),
    (dict(batch=2, seq=64, remat="half"), "remat must be one of none, full, dots; got 'half'."),
    (dict(batch=2, seq=64, optimizer="adam"), "optimizer must be one of adamw, sgd; got 'adam'."),
])
def test_bad_input_is_one_line_that_says_what_to_change(options, message):
    with pytest.raises(ShardingError) as info:
        plan(ZOO["llama"](), chips=1, **options)
    assert str(info.value).startswith(message) and "\n" not in str(info.value)


def test_a_sequence_beyond_the_models_positions_is_planned_with_a_warning():
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        plan(ZOO["llama"](), chips=1, batch=1, seq=300)
    assert [str(w.message) for w in seen] == [
        "seq=300 is longer than LlamaConfig's max_position_embeddings=256: the model was not "
        "built for it (its position embeddings end at 256); the plan counts it anyway. Plan "
        "with seq <= the limit, or a config that raises it."]


def test_an_image_size_the_model_cannot_take_says_which_would_do():
    with pytest.raises(ShardingError) as info:
        plan(ZOO["flux"](), chips=1, image_size=(1000, 1000))
    assert str(info.value) == (
        "image_size 1000x1000 does not suit FluxTransformer2DModel: height and width must be "
        "multiples of 16 (an 8x VAE, then latents packed in 2x2 patches); for example 992x992.")


def test_a_tensor_parallel_plan_beside_the_clusters_ranks(tmp_path):
    """TP=4 on the 4-process cluster (transformers' own plan, tp_plan="auto"): each rank holds
    the planned weights exactly; its peak is higher than the estimate's by what transformers'
    gather of the LM head's output stages in float32 (see docs/estimates.md)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from tpu_lab.launch import cluster as spmd

    config = LlamaConfig(hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                         num_attention_heads=8, num_key_value_heads=4, vocab_size=1024,
                         max_position_embeddings=512, architectures=["LlamaForCausalLM"])
    torch.manual_seed(0)
    LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(tmp_path)
    estimate = plan(config, chips=4, batch=4, seq=128, dtype=torch.bfloat16).estimate(
        "forward", mode="eager")
    ranks = spmd.start("v6e-4")
    try:
        result = ranks.run_cell(
            "import gc, torch\nfrom transformers import AutoModelForCausalLM\n"
            "gc.collect()\nbefore = torch.accelerator.memory_allocated()\n"
            f"m = AutoModelForCausalLM.from_pretrained({str(tmp_path)!r}, tp_plan='auto', "
            "dtype=torch.bfloat16)\n"
            "weights = torch.accelerator.memory_allocated() - before\n"
            "ids = torch.zeros(4, 128, dtype=torch.long, device='tpu')\n"
            "torch.accelerator.reset_peak_memory_stats()\n"
            "with torch.no_grad():\n    out = m(input_ids=ids, use_cache=False)\n"
            "del out\n"
            "print(weights, torch.accelerator.max_memory_allocated() - before)\n")
    finally:
        spmd.stop()
    weights, measured = map(int, result.stdout.split())
    assert estimate.memory.of("weights") == pytest.approx(weights, rel=0.01)
    assert 0.6 * measured < estimate.peak_hbm_bytes < measured
