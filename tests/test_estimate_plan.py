"""Estimates of models without weights: plan(config, ...).estimate(task) for decoder LLMs
(dense and mixture-of-experts) and the diffusion families, tensor parallelism's collectives,
FSDP and data parallelism, the HBM verdict, and the refusals."""

from __future__ import annotations

import copy

import pytest
import torch
from transformers import LlamaConfig, MixtralConfig

from _counted import counter
from tpu_lab.errors import ShardingError
from tpu_lab.models import TINY_LLAMA
from tpu_lab.sharding import plan
from tpu_lab.sharding.meta_run import FusedAttention
from tpu_lab.sharding.step_estimate import step_model
from tpu_lab.sharding.step_inputs import language_step

BF16 = torch.bfloat16
LLAMA4 = dict(TINY_LLAMA, num_key_value_heads=4)
LAYERS = TINY_LLAMA["num_hidden_layers"]

FLUX = {"_class_name": "FluxTransformer2DModel", "patch_size": 1, "in_channels": 16,
        "num_layers": 1, "num_single_layers": 1, "attention_head_dim": 16,
        "num_attention_heads": 2, "joint_attention_dim": 32, "pooled_projection_dim": 32,
        "guidance_embeds": True, "axes_dims_rope": [4, 6, 6]}
QWEN_IMAGE = {"_class_name": "QwenImageTransformer2DModel", "patch_size": 2, "in_channels": 16,
              "out_channels": 4, "num_layers": 2, "attention_head_dim": 16,
              "num_attention_heads": 3, "joint_attention_dim": 16, "axes_dims_rope": [8, 4, 4]}
UNET = {"_class_name": "UNet2DConditionModel", "block_out_channels": [32, 64],
        "layers_per_block": 1, "down_block_types": ["DownBlock2D", "CrossAttnDownBlock2D"],
        "up_block_types": ["CrossAttnUpBlock2D", "UpBlock2D"], "cross_attention_dim": 32,
        "attention_head_dim": [2, 4], "norm_num_groups": 32, "sample_size": 16,
        "addition_embed_type": "text_time", "addition_time_embed_dim": 8,
        "projection_class_embeddings_input_dim": 80, "use_linear_projection": True}
WAN = {"_class_name": "WanTransformer3DModel", "patch_size": [1, 2, 2],
       "num_attention_heads": 2, "attention_head_dim": 12, "in_channels": 4, "out_channels": 4,
       "text_dim": 16, "freq_dim": 256, "ffn_dim": 32, "num_layers": 2, "cross_attn_norm": True,
       "qk_norm": "rms_norm_across_heads", "rope_max_seq_len": 32}
LATTE = {"_class_name": "LatteTransformer3DModel", "sample_size": 8, "num_layers": 1,
         "patch_size": 2, "attention_head_dim": 4, "num_attention_heads": 2,
         "caption_channels": 8, "in_channels": 4, "cross_attention_dim": 8, "out_channels": 8,
         "attention_bias": True, "activation_fn": "gelu-approximate",
         "num_embeds_ada_norm": 1000, "norm_type": "ada_norm_single",
         "norm_elementwise_affine": False, "norm_eps": 1e-6, "video_length": 4}
VAE = {"_class_name": "AutoencoderKL", "block_out_channels": [8, 16], "layers_per_block": 1,
       "latent_channels": 4, "norm_num_groups": 4,
       "down_block_types": ["DownEncoderBlock2D"] * 2, "up_block_types": ["UpDecoderBlock2D"] * 2}


def _kinds(e) -> dict[str, int]:
    return {o.name: o.count for o in e.ops if o.kind == "collective"}


def test_a_forward_counts_the_flops_pytorchs_counter_counts_on_the_same_model():
    p = plan(LlamaConfig(**LLAMA4), chips=1, batch=2, seq=64, dtype=BF16)
    e = p.estimate("forward")
    model = step_model(p.obj, BF16)
    step = language_step(model, "forward", 2, 64, BF16)
    with torch.no_grad(), FusedAttention(), counter() as counted:
        step.call(model)
    assert e.flops == counted.get_total_flops()
    assert (e.items, e.unit, e.mode, e.chips) == (128, "tokens", "compiled", 1)
    assert e.label == "estimate of an idealised chip"


def test_tensor_parallelism_splits_the_work_and_all_reduces_after_row_parallel_layers():
    one = plan(LlamaConfig(**LLAMA4), chips=1, batch=4, seq=128, dtype=BF16).estimate("forward")
    four = plan(LlamaConfig(**LLAMA4), chips=4, batch=4, seq=128, dtype=BF16).estimate(
        "forward")
    assert four.flops == pytest.approx(one.flops / 4, rel=0.02)  # every matmul is split
    # o_proj and down_proj of each layer, and the vocab-parallel embedding; the LM head's
    # output gathered whole (its style: colwise_gather_output)
    assert _kinds(four) == {"all_reduce": 2 * LAYERS + 1, "all_gather": 1}
    assert _kinds(one) == {} and four.ici_bytes > 0
    train = plan(LlamaConfig(**LLAMA4), chips=4, batch=4, seq=128, dtype=BF16).estimate("train")
    assert train.flops == pytest.approx(3 * four.flops, rel=0.15)  # forward + 2x backward
    # the backward adds one all-reduce after each column-parallel input
    assert _kinds(train)["all_reduce"] > 2 * _kinds(four)["all_reduce"]


def test_decode_reads_the_static_cache_and_each_sequence_makes_one_token():
    p = plan(LlamaConfig(**LLAMA4), chips=1, batch=8, seq=512, dtype=BF16)
    e = p.estimate("decode")
    assert (e.items, e.unit, e.bound) == (8, "tokens", "launch")
    cache = 2 * LAYERS * 8 * 512 * LLAMA4["num_key_value_heads"] * (
        LLAMA4["hidden_size"] // LLAMA4["num_attention_heads"]) * 2
    attention = sum(o.hbm_bytes for o in e.ops if "attention" in o.name)
    assert attention >= cache  # every step reads the whole cache
    assert e.verdict.startswith("fits in HBM: peak ") and e.memory.of("KV cache") == cache


def test_fsdp_and_data_parallelism_add_their_collectives_and_split_the_batch():
    p = plan(LlamaConfig(**LLAMA4), chips=2, fsdp=2, data=2, batch=8, seq=64, dtype=BF16)
    assert (p.total_chips, p.local_batch) == (8, 2)
    e = p.estimate("train")
    assert p.estimate("train") == e  # a reused recording gives the same estimate
    kinds = _kinds(e)
    # FSDP's two gathers of the weights, and the LM head's output gathered (tensor parallel)
    assert kinds["all_gather"] == 3 and kinds["reduce_scatter"] == 1
    assert kinds["all_reduce"] > 2 * LAYERS  # tensor parallel, plus one for the gradients
    assert e.chips == 8 and e.items == 8 * 64
    assert "tensor parallel 2 x FSDP 2 x data parallel 2" in " ".join(p.notes)
    plain = plan(LlamaConfig(**LLAMA4), chips=2, batch=2, seq=64, dtype=BF16)
    assert p.weight_bytes_per_chip == tuple(-(-b // 2) for b in plain.weight_bytes_per_chip)


def test_a_mixture_of_experts_routes_tokens_evenly_and_counts_the_active_experts():
    cfg = MixtralConfig(vocab_size=256, hidden_size=64, intermediate_size=128,
                        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                        num_local_experts=4, num_experts_per_tok=2)
    e = plan(cfg, chips=1, batch=2, seq=32, dtype=BF16).estimate("forward")
    expert = sum(o.flops for o in e.ops if o.name == "aten.mm" and o.shapes in ("32x256",
                                                                                 "32x64"))
    tokens_per_expert = 2 * 32 * 2 // 4
    assert expert == 2 * 4 * 2 * tokens_per_expert * 64 * 128 * 3  # layers x experts x ...
    assert any("mixture-of-experts" in n for n in e.notes)


@pytest.mark.parametrize(("config", "kw", "unit"), [
    (FLUX, {"image_size": (64, 64)}, "images"),
    (QWEN_IMAGE, {"image_size": (64, 64)}, "images"),
    (UNET, {"image_size": (128, 128), "batch": 2}, "images"),
    (WAN, {"image_size": (64, 64), "frames": 9}, "clips"),
    (LATTE, {"image_size": (64, 64), "frames": 4}, "clips"),
    (VAE, {"image_size": (64, 64)}, "images"),
], ids=["flux", "qwen-image", "unet", "wan", "latte", "vae"])
def test_each_diffusion_family_estimates_one_call_at_image_size(config, kw, unit):
    e = plan(config, chips=1, dtype=BF16, **kw).estimate("forward")
    assert e.flops > 0 and e.seconds > 0 and e.unit == unit
    assert e.items == kw.get("batch", 1)


def test_a_pixel_unet_runs_on_a_sample_of_image_size_with_its_class_labels():
    from tpu_lab.models.digits import UNET_CONFIG

    unet = {"_class_name": "UNet2DModel", **UNET_CONFIG}
    e = plan(unet, chips=1, image_size=(8, 8), batch=3).estimate("forward")
    assert e.unit == "images" and e.items == 3
    assert any(o.name == "aten.convolution" and o.shapes == "3x32x8x8" for o in e.ops)
    assert any("embedding" in o.name for o in e.ops)  # the class embedding


def test_a_diffusion_transformer_trains_and_splits_over_its_tp_plan():
    one = plan(FLUX, chips=1, image_size=(64, 64), dtype=BF16).estimate("train")
    two = plan(FLUX, chips=2, image_size=(64, 64), dtype=BF16).estimate("train")
    assert one.flops > 2.5 * plan(FLUX, chips=1, image_size=(64, 64), dtype=BF16).estimate(
        "forward").flops
    assert two.flops < one.flops and _kinds(two)["all_reduce"] > 0


def test_the_verdict_says_when_a_plan_does_not_fit_and_the_config_is_left_as_it_was():
    cfg = LlamaConfig(vocab_size=32000, hidden_size=8192, intermediate_size=28672,
                      num_hidden_layers=2, num_attention_heads=64, num_key_value_heads=8)
    before = copy.deepcopy(cfg.to_dict())
    e = plan(cfg, chips=1, generation="v5e", batch=1, seq=128, dtype=BF16).estimate("train")
    assert e.verdict.startswith("does NOT fit in HBM: peak ") and not e.fits
    assert e.memory.of("optimizer state") == pytest.approx(2 * e.memory.of("weights"), rel=1e-6)
    assert e.peak_hbm_bytes > 16 << 30 == e.hbm_capacity
    assert cfg.to_dict() == before  # the estimate ran on a copy with its own attention


def test_refusals_say_what_was_given_and_what_to_do():
    cfg = LlamaConfig(**LLAMA4)
    with pytest.raises(ShardingError) as e:
        plan(cfg, chips=1).estimate("train")
    assert str(e.value) == (
        "An estimate needs the work of one step: plan with batch= and seq= (or image_size= for "
        "an image model), e.g. plan(config, chips=4, batch=8, seq=2048).")
    with pytest.raises(ShardingError, match="task must be one of forward, train, decode; got "
                                            "'backward'"):
        plan(cfg, chips=1, batch=1, seq=8).estimate("backward")
    with pytest.raises(ShardingError, match="does not decode tokens"):
        plan(FLUX, chips=1, image_size=(64, 64)).estimate("decode")
    with pytest.raises(ShardingError) as e:
        plan(cfg, chips=1, fsdp=4, batch=6, seq=8)
    assert str(e.value) == ("batch=6 does not split over data=1 x fsdp=4 = 4 replicas; pass a "
                            "multiple of 4 (for example 4).")
    with pytest.raises(ShardingError, match="fsdp must be a positive integer, got 0"):
        plan(cfg, chips=1, fsdp=0)
    with pytest.raises(ShardingError, match="more than one TPU v5e pod"):
        plan(cfg, chips=1, fsdp=512, generation="v5e", batch=512, seq=8).estimate("forward")
    with pytest.raises(ShardingError, match="WanTransformer3DModel makes video: pass frames="):
        plan(WAN, chips=1, image_size=(64, 64)).estimate("forward")
