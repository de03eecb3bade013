"""The estimated peak HBM against what the bundled device measures, and how far a slice goes.

    python scripts/check_memory.py [--zoo] [--max-batch]   (both by default)

``--zoo``: for a tiny model of each family (Llama, GPT-2, Qwen2, Mistral, Gemma, BERT, T5, an
SD-style UNet, a VAE, a Flux transformer), each task (train, forward, and decode for the decoders)
in bfloat16 and float32, the eager peak the estimate predicts from the step recorded on the meta
device (``plan(...).estimate(task, mode="eager").peak_hbm_bytes``) beside the peak the bundled
device measures running the same step for real (``measure_peak``:
``torch.accelerator.max_memory_allocated()`` over the step), as a Markdown table.
``--max-batch``: the largest batch of Llama-3.1-8B training at 8192 tokens on v5e-8, v6e-8 and
v5p-8 (FSDP over the slice's chips, bfloat16, compiled), with each remat choice.
tests/test_estimate_memory.py checks the zoo's rows.
"""

from __future__ import annotations

import argparse
import sys
import time

import torch
from transformers import (
    BertConfig,
    GemmaConfig,
    GPT2Config,
    LlamaConfig,
    MistralConfig,
    Qwen2Config,
    T5Config,
)

TINY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, vocab_size=256, max_position_embeddings=256)
#: A fresh tiny config of each family.
ZOO = {
    "llama": lambda: LlamaConfig(**TINY, architectures=["LlamaForCausalLM"]),
    "gpt2": lambda: GPT2Config(n_embd=64, n_layer=2, n_head=4, vocab_size=256, n_positions=256,
                               bos_token_id=0, eos_token_id=0,
                               architectures=["GPT2LMHeadModel"]),
    "qwen2": lambda: Qwen2Config(**TINY, architectures=["Qwen2ForCausalLM"]),
    "mistral": lambda: MistralConfig(**TINY, architectures=["MistralForCausalLM"]),
    "gemma": lambda: GemmaConfig(**TINY, head_dim=16, architectures=["GemmaForCausalLM"]),
    "bert": lambda: BertConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                               num_attention_heads=4, vocab_size=256,
                               max_position_embeddings=256, architectures=["BertForMaskedLM"]),
    "t5": lambda: T5Config(d_model=64, d_ff=128, num_layers=2, num_heads=4, d_kv=16,
                           vocab_size=256, architectures=["T5EncoderModel"]),
    "unet": lambda: {
        "_class_name": "UNet2DConditionModel", "sample_size": 8, "in_channels": 4,
        "out_channels": 4, "block_out_channels": [32, 64], "layers_per_block": 1,
        "down_block_types": ["CrossAttnDownBlock2D", "DownBlock2D"],
        "up_block_types": ["UpBlock2D", "CrossAttnUpBlock2D"], "cross_attention_dim": 32,
        "attention_head_dim": 8, "norm_num_groups": 8},
    "vae": lambda: {
        "_class_name": "AutoencoderKL", "block_out_channels": [32, 64],
        "down_block_types": ["DownEncoderBlock2D"] * 2,
        "up_block_types": ["UpDecoderBlock2D"] * 2, "latent_channels": 4,
        "layers_per_block": 1, "norm_num_groups": 8, "sample_size": 64},
    "flux": lambda: {
        "_class_name": "FluxTransformer2DModel", "patch_size": 1, "in_channels": 16,
        "num_layers": 1, "num_single_layers": 1, "attention_head_dim": 16,
        "num_attention_heads": 2, "joint_attention_dim": 32, "pooled_projection_dim": 32,
        "guidance_embeds": False, "axes_dims_rope": [4, 6, 6]},
}  # fmt: skip
DECODERS = {"llama", "gpt2", "qwen2", "mistral", "gemma"}
IMAGES = {"unet", "vae", "flux"}
CASES = [(name, dtype, task) for name in ZOO for dtype in (torch.bfloat16, torch.float32)
         for task in ("train", "forward", *(("decode",) if name in DECODERS else ()))]
#: The slices of the max-batch table: (topology, chips).
SLICES = (("v5e-8", 8), ("v6e-8", 8), ("v5p-8", 4))


def zoo_plan(name: str, dtype=torch.bfloat16, **options):
    """The plan of ``name``'s tiny model on one chip: batch 2 x 64 tokens, or 2 images of
    64x64."""
    from tpu_lab.sharding import plan

    step = dict(image_size=(64, 64), batch=2) if name in IMAGES else dict(batch=2, seq=64)
    return plan(ZOO[name](), chips=1, dtype=dtype, **step, **options)


def zoo_table() -> list[str]:
    from tpu_lab.sharding.step_estimate import measure_peak

    lines = ["| model | dtype | task | estimated peak | measured peak | estimated / measured |",
             "|---|---|---|---:|---:|---:|"]
    for name, dtype, task in CASES:
        p = zoo_plan(name, dtype)
        predicted = p.estimate(task, mode="eager").peak_hbm_bytes
        measured = measure_peak(p, task)
        lines.append(f"| {name} | {str(dtype)[6:]} | {task} | {predicted:,.0f} B | "
                     f"{measured:,} B | {predicted / measured:.4f} |")
    return lines


def max_batch_table() -> list[str]:
    from tpu_lab.sharding import plan
    from tpu_lab.sharding.published_configs import config
    from tpu_lab.units import format_bytes

    lines = ["| slice | remat | largest batch (sequences of 8192) | per chip | peak per chip "
             "| what fills HBM there |", "|---|---|---:|---:|---:|---|"]
    for topology, chips in SLICES:
        p = plan(config("llama-3.1-8b"), chips=1, fsdp=chips, generation=topology.split("-")[0],
                 seq=8192, dtype=torch.bfloat16)
        for row in p.max_batch("train", limit=512).rows:
            memory = row.estimate.memory
            fills = ", ".join(f"{k} {format_bytes(int(n))}" for k, n in memory.breakdown[:3])
            peak = format_bytes(int(memory.peak_bytes))
            if not row.fits:
                peak += f" at batch {row.estimate_batch} (over)"
            lines.append(f"| {topology} | {row.remat} | {row.batch} | "
                         f"{row.batch / chips:g} | {peak} | {fills} |")
    return lines


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--zoo", action="store_true", help="the zoo's peaks against the device")
    parser.add_argument("--max-batch", action="store_true",
                        help="Llama-3.1-8B's largest training batch on 8-chip slices")
    args = parser.parse_args(argv)
    both = not (args.zoo or args.max_batch)
    import tpu_lab  # noqa: F401  (the "tpu" device)

    start = time.perf_counter()
    if args.zoo or both:
        print("\n".join(zoo_table()))
    if args.max_batch or both:
        print("\n".join(max_batch_table()))
    print(f"\n({time.perf_counter() - start:.0f} s, torch {torch.__version__})")


if __name__ == "__main__":
    main(sys.argv[1:])
