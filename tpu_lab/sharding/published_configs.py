"""Published model configs, written out (no hub downloads): the numbers of each model's
``config.json`` that decide its cost, with the file they come from.

``config(name)`` builds a fresh transformers config object (or a diffusers config dict) to
plan without weights: ``tpu_lab.sharding.plan(config("llama-3.1-8b"), chips=8, ...)``.
Fields a config leaves out take the library's defaults, as loading the file would.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import ShardingError

HF = "https://huggingface.co"


@dataclass(frozen=True)
class Published:
    """One model's config: the library class it builds and the numbers of its file."""

    cls: str  # transformers config class, or "diffusers"
    values: dict = field(hash=False)
    source: str = ""


def _llama(hidden, inter, layers, heads, kv, vocab, repo, **extra) -> Published:
    values = {"hidden_size": hidden, "intermediate_size": inter, "num_hidden_layers": layers,
              "num_attention_heads": heads, "num_key_value_heads": kv, "vocab_size": vocab,
              "tie_word_embeddings": False, "architectures": ["LlamaForCausalLM"], **extra}
    source = f"{HF}/{repo}/blob/main/config.json" if repo else _SYNTHETIC
    return Published("LlamaConfig", values, source)


#: MaxText's synthetic models of its 2023 README tables (base.yml: a GPT-like decoder with a
#: non-gated ReLU MLP of 32768, head_dim 256, tied embeddings, vocabulary 32768, scaled by
#: ``global_parameter_scale``: 16B = width 5120 and 32 layers, 32B = width 10240 and 32
#: layers, 32 heads each), rebuilt as the nearest transformers model: a Llama with head_dim
#: 256, tied embeddings and a gated MLP of 21888 (2/3 of 32768, rounded up to whole MXU tiles:
#: the same FLOPs within 0.2%; an approximation: the activations differ).
_SYNTHETIC = ("AI-Hypercomputer/maxtext MaxText/configs/base.yml @ 76bd53b0f44caf989c88189afadeb1"
              "062f9254f0, scaled as MaxText/configs/v5p/32b.sh (approximated, see above)")


_SDXL_UNET = {
    "_class_name": "UNet2DConditionModel", "act_fn": "silu", "addition_embed_type": "text_time",
    "addition_embed_type_num_heads": 64, "addition_time_embed_dim": 256,
    "attention_head_dim": [5, 10, 20], "block_out_channels": [320, 640, 1280],
    "center_input_sample": False, "cross_attention_dim": 2048,
    "down_block_types": ["DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"],
    "downsample_padding": 1, "in_channels": 4, "layers_per_block": 2,
    "mid_block_type": "UNetMidBlock2DCrossAttn", "norm_eps": 1e-05, "norm_num_groups": 32,
    "out_channels": 4, "projection_class_embeddings_input_dim": 2816, "sample_size": 128,
    "transformer_layers_per_block": [1, 2, 10],
    "up_block_types": ["CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"],
    "use_linear_projection": True,
}
_VAE = {
    "_class_name": "AutoencoderKL", "act_fn": "silu", "block_out_channels": [128, 256, 512, 512],
    "down_block_types": ["DownEncoderBlock2D"] * 4, "in_channels": 3, "latent_channels": 4,
    "layers_per_block": 2, "norm_num_groups": 32, "out_channels": 3, "sample_size": 1024,
    "up_block_types": ["UpDecoderBlock2D"] * 4,
}
_FLUX = {
    "_class_name": "FluxTransformer2DModel", "patch_size": 1, "in_channels": 64,
    "num_layers": 19, "num_single_layers": 38, "attention_head_dim": 128,
    "num_attention_heads": 24, "joint_attention_dim": 4096, "pooled_projection_dim": 768,
    "guidance_embeds": True, "axes_dims_rope": [16, 56, 56],
}

PUBLISHED: dict[str, Published] = {
    "llama-2-7b": _llama(4096, 11008, 32, 32, 32, 32000, "meta-llama/Llama-2-7b-hf",
                        max_position_embeddings=4096),
    "llama-2-13b": _llama(5120, 13824, 40, 40, 40, 32000, "meta-llama/Llama-2-13b-hf",
                         max_position_embeddings=4096),
    "llama-2-70b": _llama(8192, 28672, 80, 64, 8, 32000, "meta-llama/Llama-2-70b-hf",
                         max_position_embeddings=4096),
    "llama-3-8b": _llama(4096, 14336, 32, 32, 8, 128256, "meta-llama/Meta-Llama-3-8B",
                         rope_theta=500000.0, max_position_embeddings=8192),
    "llama-3.1-8b": _llama(4096, 14336, 32, 32, 8, 128256, "meta-llama/Llama-3.1-8B",
                           rope_theta=500000.0, max_position_embeddings=131072),
    "llama-3.1-70b": _llama(8192, 28672, 80, 64, 8, 128256, "meta-llama/Llama-3.1-70B",
                            rope_theta=500000.0, max_position_embeddings=131072),
    "llama-3.1-405b": _llama(16384, 53248, 126, 128, 8, 128256, "meta-llama/Llama-3.1-405B",
                             rope_theta=500000.0, max_position_embeddings=131072),
    "llama-3.3-70b": _llama(8192, 28672, 80, 64, 8, 128256,
                            "meta-llama/Llama-3.3-70B-Instruct", rope_theta=500000.0,
                            max_position_embeddings=131072),
    "mistral-7b": Published("MistralConfig", {
        "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 32000,
        "max_position_embeddings": 32768, "sliding_window": None,
        "architectures": ["MistralForCausalLM"]},
        f"{HF}/mistralai/Mistral-7B-v0.1/blob/main/config.json (sliding window off: MaxText's "
        "run attends over the whole sequence)"),
    "gemma-2b": Published("GemmaConfig", {
        "hidden_size": 2048, "intermediate_size": 16384, "num_hidden_layers": 18,
        "num_attention_heads": 8, "num_key_value_heads": 1, "head_dim": 256,
        "vocab_size": 256000, "max_position_embeddings": 8192,
        "architectures": ["GemmaForCausalLM"]},
        f"{HF}/google/gemma-2b/blob/main/config.json"),
    "gpt-3-175b": Published("GPT2Config", {
        "n_embd": 12288, "n_layer": 96, "n_head": 96, "n_inner": 49152, "vocab_size": 50304,
        "n_positions": 2048, "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0,
        "activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"]},
        "MaxText's gpt3-175b.yml, as AI-Hypercomputer/tpu-recipes training/trillium/"
        "GPT3-175B-MaxText/bf16/README.md runs it (GPT-2-style at its sizes: 96 layers, width "
        "12288, MLP 49152, 96 heads, vocabulary 50304, tied, no dropout)"),
    "maxtext-synthetic-16b": _llama(
        5120, 21888, 32, 32, 32, 32768, "", head_dim=256, tie_word_embeddings=True,
        max_position_embeddings=2048),
    "maxtext-synthetic-32b": _llama(
        10240, 21888, 32, 32, 32, 32768, "", head_dim=256, tie_word_embeddings=True,
        max_position_embeddings=2048),
    "gemma-7b": Published("GemmaConfig", {
        "hidden_size": 3072, "intermediate_size": 24576, "num_hidden_layers": 28,
        "num_attention_heads": 16, "num_key_value_heads": 16, "head_dim": 256,
        "vocab_size": 256000, "max_position_embeddings": 8192,
        "architectures": ["GemmaForCausalLM"]},
        f"{HF}/google/gemma-7b/blob/main/config.json"),
    "mixtral-8x7b": Published("MixtralConfig", {
        "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 32000,
        "num_local_experts": 8, "num_experts_per_tok": 2, "rope_theta": 1e6,
        "max_position_embeddings": 32768,
        "architectures": ["MixtralForCausalLM"]},
        f"{HF}/mistralai/Mixtral-8x7B-v0.1/blob/main/config.json"),
    "flux.1-dev": Published("diffusers", _FLUX,
                            f"{HF}/black-forest-labs/FLUX.1-dev/blob/main/transformer/config.json"),
    "flux.1-schnell": Published(
        "diffusers", {**_FLUX, "guidance_embeds": False},
        f"{HF}/black-forest-labs/FLUX.1-schnell/blob/main/transformer/config.json"),
    "flux.1-vae": Published(
        "diffusers", {**_VAE, "latent_channels": 16, "use_quant_conv": False,
                      "use_post_quant_conv": False},
        f"{HF}/black-forest-labs/FLUX.1-dev/blob/main/vae/config.json"),
    "sdxl-unet": Published(
        "diffusers", _SDXL_UNET,
        f"{HF}/stabilityai/stable-diffusion-xl-base-1.0/blob/main/unet/config.json"),
    "sdxl-vae": Published(
        "diffusers", _VAE,
        f"{HF}/stabilityai/stable-diffusion-xl-base-1.0/blob/main/vae/config.json"),
    "qwen-image": Published("diffusers", {
        "_class_name": "QwenImageTransformer2DModel", "patch_size": 2, "in_channels": 64,
        "out_channels": 16, "num_layers": 60, "attention_head_dim": 128,
        "num_attention_heads": 24, "joint_attention_dim": 3584, "guidance_embeds": False,
        "axes_dims_rope": [16, 56, 56]},
        f"{HF}/Qwen/Qwen-Image/blob/main/transformer/config.json"),
    "wan2.1-t2v-14b": Published("diffusers", {
        "_class_name": "WanTransformer3DModel", "patch_size": [1, 2, 2],
        "num_attention_heads": 40, "attention_head_dim": 128, "in_channels": 16,
        "out_channels": 16, "text_dim": 4096, "freq_dim": 256, "ffn_dim": 13824,
        "num_layers": 40, "cross_attn_norm": True, "qk_norm": "rms_norm_across_heads",
        "eps": 1e-06, "rope_max_seq_len": 1024},
        f"{HF}/Wan-AI/Wan2.1-T2V-14B-Diffusers/blob/main/transformer/config.json"),
}


def config(name: str):
    """A fresh config of the published model ``name`` (see :data:`PUBLISHED`)."""
    found = PUBLISHED.get(name)
    if found is None:
        raise ShardingError(f"No published config {name!r}; known: {', '.join(PUBLISHED)}.")
    if found.cls == "diffusers":
        return {k: list(v) if isinstance(v, list) else v for k, v in found.values.items()}
    import transformers

    return getattr(transformers, found.cls)(**found.values)
