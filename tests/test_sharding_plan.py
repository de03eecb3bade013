"""Planning without weights: layouts from tp_plans on meta models, HBM per chip, refusals."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from tpu_lab.errors import ShardingError, TopologyError
from tpu_lab.models import TINY_LLAMA
from tpu_lab.sharding import plan

#: The tiny Llama with as many key/value heads as query heads, so that 4 chips divide them.
LLAMA4 = dict(TINY_LLAMA, num_key_value_heads=4)
COLWISE = ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj")
ROWWISE = ("o_proj", "down_proj")


def _real_bytes(model: torch.nn.Module) -> int:
    tensors = {id(t): t for t in (*model.parameters(), *model.buffers())}
    return sum(t.nbytes for t in tensors.values())


def test_tiny_llama_over_4_chips_quarters_the_split_weights_and_keeps_the_rest_whole():
    p = plan(LlamaConfig(**LLAMA4), chips=4, generation="v6e")
    layout = p.layout
    assert (p.chips, p.topology, layout.mesh_shape) == (4, "v6e-4", (4,))
    styles = {}
    for e in layout.entries:
        part = e.name.split(".")[-2]
        if part in COLWISE + ROWWISE + ("lm_head", "embed_tokens"):
            assert [b * 4 for b in e.info.bytes_per_chip] == [e.info.global_bytes] * 4, e.name
            dim = 1 if part in ROWWISE else 0
            assert e.info.placements == (f"Shard({dim})",), e.name
            assert e.info.local_shape(3)[dim] * 4 == e.info.global_shape[dim]
        else:
            assert e.info.placements == ("Replicate()",) and e.style is None, e.name
            assert e.info.bytes_per_chip == (e.info.global_bytes,) * 4, e.name
        styles[part] = e.style
    assert styles["q_proj"] == "colwise" and styles["o_proj"] == "rowwise"
    assert styles["lm_head"] == "colwise_gather_output"
    assert styles["embed_tokens"] == "embedding_rowwise"
    # totals add up: per chip = sum of entries; unsharded = the bytes of the real model
    assert layout.bytes_per_chip == tuple(
        sum(e.info.bytes_per_chip[c] for e in layout.entries) for c in range(4))
    torch.manual_seed(0)
    assert layout.global_bytes == _real_bytes(LlamaForCausalLM(LlamaConfig(**LLAMA4)))
    split = sum(e.info.global_bytes for e in layout.entries if e.style)
    whole = layout.global_bytes - split
    assert layout.bytes_per_chip == (split // 4 + whole,) * 4
    q = layout["model.layers.1.self_attn.q_proj.weight"].info
    assert [b[0][0] for b in q.slices] == [slice(0, 16), slice(16, 32), slice(32, 48),
                                           slice(48, 64)]


def test_a_plan_that_splits_key_value_heads_is_refused_with_the_reason():
    with pytest.raises(ShardingError) as e:
        plan(LlamaConfig(**TINY_LLAMA), chips=4)
    assert str(e.value) == (
        "Cannot split model.layers.0.self_attn.k_proj.weight over 4 chips: 'colwise' splits dim 0 "
        "into per-chip heads, but num_key_value_heads=2 does not divide by 4 (and 1 more from "
        "plan key 'model.layers.*.self_attn.k_proj'). Use a chip count that divides 2: 1, 2."
    )
    assert plan(LlamaConfig(**TINY_LLAMA), chips=2).weights_fit


class MLP(torch.nn.Module):
    def __init__(self, hidden: int = 16, inner: int = 30) -> None:
        super().__init__()
        self.up = torch.nn.Linear(hidden, inner)
        self.down = torch.nn.Linear(inner, hidden)

    def forward(self, x):
        return self.down(torch.relu(self.up(x)))


def test_a_hidden_size_that_does_not_divide_is_refused_naming_parameter_dim_size_chips():
    with torch.device("meta"):
        model = MLP(inner=30)
    with pytest.raises(ShardingError) as e:
        plan(model, chips=4, tp_plan={"up": "colwise", "down": "rowwise"})
    assert str(e.value) == (
        "Cannot split up.weight (shape (30, 16)) over 4 chips: 'colwise' splits dim 0, size 30, "
        "which does not divide by 4. Use a chip count that divides 30: 1, 2, 3, 5, 6, 10, 15, 30. "
        "(2 more like it)"
    )
    ok = plan(model, chips=2, tp_plan={"up": "colwise", "down": "rowwise"})
    assert ok.layout["up.bias"].info.placements == ("Shard(0)",)
    assert ok.layout["down.bias"].info.placements == ("Replicate()",)


def test_plan_inputs_config_meta_model_real_model_and_directory_agree(tmp_path):
    config = LlamaConfig(**LLAMA4)
    config.save_pretrained(tmp_path)
    with torch.device("meta"):
        meta = LlamaForCausalLM(config)
    layouts = [plan(obj, chips=4).layout for obj in (config, meta, str(tmp_path))]
    assert layouts[0] == layouts[1] == layouts[2]
    assert plan(str(tmp_path), chips=4).source == str(tmp_path)


def test_user_plan_entries_update_the_models_plan_and_base_model_keys_resolve():
    p = plan(LlamaConfig(**LLAMA4), chips=4, tp_plan={"layers.*.mlp.down_proj": "replicate"})
    e = p.layout["model.layers.0.mlp.down_proj.weight"]
    assert (e.style, e.info.placements) == ("replicate", ("Replicate()",))
    with pytest.raises(ShardingError, match=r"tp_plan key 'layers\.\*\.mlp\.nope' matches no "
                                            r"module or parameter of LlamaForCausalLM"):
        plan(LlamaConfig(**LLAMA4), chips=4, tp_plan={"layers.*.mlp.nope": "colwise"})
    with pytest.raises(ShardingError, match=r"Unknown tensor-parallel style 'diagonal'"):
        plan(LlamaConfig(**LLAMA4), chips=4, tp_plan={"lm_head": "diagonal"})


def test_dtype_generation_and_fit():
    p = plan(LlamaConfig(**LLAMA4), chips=4, dtype=torch.bfloat16)
    assert p.dtype == torch.bfloat16
    assert p.layout["lm_head.weight"].info.bytes_per_chip[0] == 256 * 64 * 2 // 4
    assert p.layout["model.rotary_emb.inv_freq"].info.dtype == torch.float32
    big = LlamaConfig(vocab_size=128256, hidden_size=8192, intermediate_size=28672,
                      num_hidden_layers=80, num_attention_heads=64, num_key_value_heads=8)
    v5e = plan(big, generation="v5e-4", dtype=torch.bfloat16)
    assert v5e.chips == 4 and not v5e.weights_fit
    assert v5e.weight_bytes_per_chip[0] > v5e.hbm_per_chip == 16 << 30
    assert plan(big, chips=8, generation="v7", dtype=torch.bfloat16).weights_fit
    with pytest.raises(TopologyError, match="Unknown TPU generation 'v9'"):
        plan(big, generation="v9")
    with pytest.raises(TopologyError, match="generation='v6e-8' has 8 chips but chips=4"):
        plan(big, chips=4, generation="v6e-8")
    odd = plan(LlamaConfig(**LLAMA4), chips=2, generation="v6e")
    assert odd.topology is None and "TPU v6e has no 2-chip host topology" in odd.notes[0]


def test_the_steps_activations_scale_with_tokens_and_split_with_the_chips():
    config = LlamaConfig(**LLAMA4)

    def saved(vocab=32, **options):
        e = plan(LlamaConfig(**dict(LLAMA4, vocab_size=vocab)), dtype=torch.bfloat16, seq=32,
                 **options).estimate("train", mode="eager")
        return e.memory.of("activations saved for backward")

    one, four, double = saved(chips=1, batch=2), saved(chips=4, batch=2), saved(chips=4, batch=4)
    assert double == pytest.approx(2 * four, rel=0.05)
    assert four < 0.6 * one  # most activations split with the heads and the MLP
    # the LM head's output is gathered whole on every chip (colwise_gather_output): a larger
    # vocabulary adds as much to each of four chips as to one
    assert saved(256, chips=4, batch=2) - four == pytest.approx(
        saved(256, chips=1, batch=2) - one, rel=0.05)
    assert plan(config, chips=4).batch is None  # no step: weights only
    with pytest.raises(ShardingError, match="Pass seq with batch"):
        plan(config, chips=4, batch=2)


FLUX = dict(_class_name="FluxTransformer2DModel", patch_size=1, in_channels=16, num_layers=1,
            num_single_layers=1, attention_head_dim=16, num_attention_heads=4,
            joint_attention_dim=32, pooled_projection_dim=32, axes_dims_rope=(4, 6, 6))


def test_diffusers_tp_plan_with_fused_blocks():
    p = plan(FLUX, chips=4, image_size=(256, 256))
    assert (p.model, p.batch, p.seq) == ("FluxTransformer2DModel", 1, 256)
    out = p.layout["single_transformer_blocks.0.proj_out.weight"]
    assert out.style == "PackedRowwiseParallel"
    assert out.info.placements == ("Shard(1, blocks=[64, 256])",)
    assert out.info.slices[1] == ((slice(0, 64), slice(16, 32)), (slice(0, 64), slice(128, 192)))
    assert p.layout["transformer_blocks.0.attn.to_q.weight"].info.placements == ("Shard(0)",)
    assert p.layout["transformer_blocks.0.norm1.linear.weight"].style is None
    with pytest.raises(ShardingError, match="num_attention_heads=4 does not divide by 8"):
        plan(FLUX, chips=8)


def test_bad_inputs_say_what_to_pass(tmp_path):
    with pytest.raises(ShardingError, match="Cannot plan a int: pass a transformers config"):
        plan(3)
    with pytest.raises(ShardingError, match="is not a local directory with a config.json"):
        plan(str(tmp_path / "missing"))
    with pytest.raises(ShardingError, match="has no config.json"):
        plan(str(tmp_path))
    with torch.device("meta"):
        bare = MLP(16, 32)
    with pytest.raises(ShardingError, match="MLP has no tensor-parallel plan"):
        plan(bare, chips=4)
    assert plan(bare, chips=1).layout.bytes_per_chip == ((16 * 32 * 2 + 32 + 16) * 4,)


def test_a_diffusers_pipeline_directory_plans_its_transformer(tmp_path):
    import json

    (tmp_path / "transformer").mkdir()
    (tmp_path / "model_index.json").write_text(json.dumps({"_class_name": "FluxPipeline"}))
    (tmp_path / "transformer" / "config.json").write_text(json.dumps(FLUX))
    p = plan(str(tmp_path), chips=2)
    assert p.model == "FluxTransformer2DModel"
    assert p.source == str(tmp_path / "transformer")
    assert p.layout == plan(FLUX, chips=2).layout


def test_torch_parallel_style_objects_plan_like_their_names():
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    with torch.device("meta"):
        model = MLP(16, 32)
    named = plan(model, chips=2, tp_plan={"up": "colwise", "down": "rowwise"}).layout
    styled = plan(model, chips=2, tp_plan={"up": ColwiseParallel(), "down": RowwiseParallel()})
    assert [e.info for e in styled.layout.entries] == [e.info for e in named.entries]
    assert styled.layout["up.weight"].style == "ColwiseParallel"


def test_a_pod_slice_plan_says_what_each_host_holds_and_that_tp_crosses_hosts():
    from tpu_lab.views import view

    config = LlamaConfig(**{**TINY_LLAMA, "num_key_value_heads": 16, "num_attention_heads": 16,
                            "hidden_size": 256, "intermediate_size": 512})  # fmt: skip
    pod = plan(config, generation="v6e-16")
    assert (pod.chips, pod.hosts, pod.chips_per_host, pod.topology) == (16, 4, 4, "v6e-16")
    assert pod.weight_bytes_per_host == tuple(
        sum(pod.weight_bytes_per_chip[4 * h:4 * h + 4]) for h in range(4))  # fmt: skip
    assert plan(config, chips=16).hosts == 4  # 16 v6e chips exist only as a pod slice
    assert plan(config, chips=8).hosts == 1  # 8 exist on one host
    assert "replicate across hosts (tpu_lab.sharding.hybrid)" in pod.notes[0]
    text = view(pod).to_text(width=100)
    assert "4 hosts of 4 chips: each host holds " in text
    assert " host 3 (chips 12-15): " in text
    assert text.index(" host 1 (chips 4-7)") < text.index("  chip 4 ")
