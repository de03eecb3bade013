"""The inputs one step of a model takes, built on the meta device from its config and the
plan's batch, sequence length or image size (no data, no weights).

- transformers models: ``input_ids`` of ``batch x seq`` tokens (and ``labels`` to train a
  causal LM); to decode, one new token per sequence after a static cache of ``seq`` tokens;
- diffusers denoisers, one call at ``image_size`` (``h x w`` pixels; latents are 8x smaller,
  as with every VAE these models ship with): Flux and Qwen-Image transformers (2x2 latent
  patches), SDXL-style UNets, Wan (4x fewer latent frames, plus the first) and Latte video
  transformers (``frames`` frames); text-encoder states of :data:`TEXT_TOKENS` tokens (the
  pipelines' default lengths, ``text_tokens=`` to change);
- ``UNet2DModel``: one call on a sample of ``image_size`` itself (a pixel-space model's
  image, or the latents of a pipeline whose VAE the caller accounts for), with class labels
  when it has a class embedding;
- a VAE (``AutoencoderKL``, ``AutoencoderKLWan``): one decode of the latents of one image or
  clip, the way a pipeline runs it (text encoders are transformers models, planned like any).

Classifier-free guidance runs the denoiser on twice the batch: plan ``batch=2 * images``.
"""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass
from typing import Any

import torch

from ..errors import ShardingError

#: Text-encoder tokens each denoiser reads, from its pipeline's default: Flux's T5 prompt
#: (``max_sequence_length=512``, padded to it), Qwen-Image's (``max_sequence_length=512``),
#: SDXL's CLIP (77), Wan's T5 (512, padded), Latte's T5 (120).
TEXT_TOKENS = {
    "FluxTransformer2DModel": 512,
    "QwenImageTransformer2DModel": 512,
    "UNet2DConditionModel": 77,
    "WanTransformer3DModel": 512,
    "LatteTransformer3DModel": 120,
}
VIDEO = {"WanTransformer3DModel", "LatteTransformer3DModel", "AutoencoderKLWan"}
VAES = {"AutoencoderKL", "AutoencoderKLWan"}
#: Transformers whose pipelines pack the latents in 2x2 patches before the model sees them.
PACKED = {"FluxTransformer2DModel", "QwenImageTransformer2DModel"}
#: Denoisers whose ``image_size`` is their sample's own size (no 8x VAE between: a UNet2DModel
#: denoises pixels, or latents whose size the caller gives).
SAMPLES = {"UNet2DModel"}


@dataclass
class Step:
    """How to call the model once: ``call(model)`` returns what the model returns (kept, as a
    training loop's ``out = model(**batch)`` keeps it, until the step ends), ``loss(out)`` the
    loss a training step takes its gradient of: the model's own for a causal LM with labels,
    else the mean square of its main output; ``items`` ``unit`` is what the call produces."""

    kwargs: dict[str, Any]
    items: float
    unit: str
    method: str = "__call__"
    labels: bool = False

    def call(self, model: torch.nn.Module):
        return getattr(model, self.method)(**self.kwargs)

    def on(self, device) -> Step:
        """The same step with zeros on ``device`` for every tensor (a model with weights runs
        it there: the check of an estimate on a real device)."""

        def moved(x):
            if isinstance(x, torch.Tensor):
                return torch.zeros(x.shape, dtype=x.dtype, device=device)
            if isinstance(x, dict):
                return {k: moved(v) for k, v in x.items()}
            return x

        return dataclasses.replace(self, kwargs=moved(self.kwargs))

    def loss(self, out) -> torch.Tensor:
        for name in ("loss", "sample", "logits", "last_hidden_state"):
            value = getattr(out, name, None)
            if isinstance(value, torch.Tensor):
                break
        else:
            value = out[0] if isinstance(out, (tuple, list)) else out
        return value if self.labels else value.float().square().mean()


def _empty(*shape, dtype=torch.float32) -> torch.Tensor:
    return torch.empty(*shape, device="meta", dtype=dtype)


def _ids(*shape) -> torch.Tensor:
    return torch.zeros(*shape, device="meta", dtype=torch.long)


def is_diffusers(model: torch.nn.Module) -> bool:
    return type(model).__module__.startswith("diffusers.")


def family(model: torch.nn.Module) -> str:
    """The model's class name when it is a diffusers model this module knows, "transformers"
    for a transformers model; anything else is a :class:`ShardingError`."""
    name = type(model).__name__
    if is_diffusers(model):
        if name in TEXT_TOKENS or name in VAES or name in SAMPLES:
            return name
        known = ", ".join(sorted({*TEXT_TOKENS, *VAES, *SAMPLES}))
        raise ShardingError(f"No estimate for diffusers' {name} yet; estimated: {known}.")
    if hasattr(model, "config") and hasattr(model.config, "model_type"):
        return "transformers"
    raise ShardingError(
        f"No estimate for a {name}: estimates cover transformers models and the diffusers "
        f"models {', '.join(sorted({*TEXT_TOKENS, *VAES, *SAMPLES}))}."
    )


def image_multiple(model: torch.nn.Module) -> tuple[int, str]:
    """What an image's height and width must be multiples of for ``model``, and why."""
    name, cfg = type(model).__name__, getattr(model, "config", None)
    downsamples = len(getattr(cfg, "down_block_types", ()) or ()) - 1
    if name == "UNet2DConditionModel":
        return 8 * 2 ** max(downsamples, 0), (f"an 8x VAE, then {max(downsamples, 0)} "
                                              "downsamplings of the UNet")
    if name in SAMPLES:
        return 2 ** max(downsamples, 0), f"{max(downsamples, 0)} downsamplings of the UNet"
    if name in VAES:
        return 8, "the VAE decodes latents 8 times smaller"
    if name in PACKED:
        return 16, "an 8x VAE, then latents packed in 2x2 patches"
    if name in TEXT_TOKENS:
        patch = getattr(cfg, "patch_size", 2) or 2
        patch = patch[-1] if isinstance(patch, (tuple, list)) else patch
        return 8 * patch, f"an 8x VAE, then {patch}x{patch} patches"
    return 1, "any size"


def _latent(size: tuple[int, int] | None, name: str) -> tuple[int, int]:
    if size is None:
        raise ShardingError(f"{name} needs image_size=(height, width) to estimate a step.")
    h, w = size
    return h // 8, w // 8


def language_step(model, task: str, batch: int, seq: int, dtype) -> Step:
    """The inputs of a transformers model for ``task`` ("forward", "train", "decode")."""
    causal = model.get_output_embeddings() is not None if hasattr(
        model, "get_output_embeddings") else False
    if task == "decode":
        if not causal:
            raise ShardingError(f"{type(model).__name__} does not generate text: decode "
                                "needs a causal language model.")
        from transformers import StaticCache

        cache = StaticCache(config=model.config, max_cache_len=seq)
        name = "cache" if "cache" in inspect.signature(model.forward).parameters else (
            "past_key_values")
        kwargs = {"input_ids": _ids(batch, 1), name: cache, "use_cache": True,
                  "cache_position": torch.full((1,), seq - 1, device="meta", dtype=torch.long)}
        return Step(kwargs, batch, "tokens")
    kwargs = {"input_ids": _ids(batch, seq), "use_cache": False}
    if task == "train" and causal:
        kwargs["labels"] = _ids(batch, seq)
    return Step(kwargs, batch * seq, "tokens", labels=task == "train" and causal)


def diffusion_step(model, batch: int, dtype, image_size, frames: int | None,
                   text_tokens: int | None) -> Step:
    """The inputs of one call of a diffusers denoiser or VAE."""
    name, cfg = type(model).__name__, model.config
    h, w = _latent(image_size, name)
    if name in SAMPLES:
        kwargs = {"sample": _empty(batch, cfg.in_channels, *image_size, dtype=dtype),
                  "timestep": _empty(batch)}
        if cfg.num_class_embeds:
            kwargs["class_labels"] = _ids(batch)
        return Step(kwargs, batch, "images")
    tokens = text_tokens or TEXT_TOKENS.get(name, 0)
    if name in VIDEO and not frames:
        raise ShardingError(f"{name} makes video: pass frames= (for example frames=81).")
    unit = "clips" if name in VIDEO else "images"
    t = _empty(batch)
    if name == "FluxTransformer2DModel":
        n = (h // 2) * (w // 2)
        kwargs = {"hidden_states": _empty(batch, n, cfg.in_channels, dtype=dtype),
                  "encoder_hidden_states": _empty(batch, tokens, cfg.joint_attention_dim,
                                                  dtype=dtype),
                  "pooled_projections": _empty(batch, cfg.pooled_projection_dim, dtype=dtype),
                  "timestep": t, "img_ids": _empty(n, 3), "txt_ids": _empty(tokens, 3)}
        if cfg.guidance_embeds:
            kwargs["guidance"] = _empty(batch)
    elif name == "QwenImageTransformer2DModel":
        n = (h // 2) * (w // 2)
        kwargs = {"hidden_states": _empty(batch, n, cfg.in_channels, dtype=dtype),
                  "encoder_hidden_states": _empty(batch, tokens, cfg.joint_attention_dim,
                                                  dtype=dtype),
                  "timestep": t, "img_shapes": [[(1, h // 2, w // 2)]] * batch}
    elif name == "UNet2DConditionModel":
        kwargs = {"sample": _empty(batch, cfg.in_channels, h, w, dtype=dtype), "timestep": t,
                  "encoder_hidden_states": _empty(batch, tokens, cfg.cross_attention_dim,
                                                  dtype=dtype)}
        if cfg.addition_embed_type == "text_time":
            text = cfg.projection_class_embeddings_input_dim - 6 * cfg.addition_time_embed_dim
            kwargs["added_cond_kwargs"] = {"text_embeds": _empty(batch, text, dtype=dtype),
                                           "time_ids": _empty(batch, 6, dtype=dtype)}
    elif name == "WanTransformer3DModel":
        kwargs = {"hidden_states": _empty(batch, cfg.in_channels, (frames - 1) // 4 + 1, h, w,
                                          dtype=dtype),
                  "timestep": t,
                  "encoder_hidden_states": _empty(batch, tokens, cfg.text_dim, dtype=dtype)}
    elif name == "LatteTransformer3DModel":
        kwargs = {"hidden_states": _empty(batch, cfg.in_channels, frames, h, w, dtype=dtype),
                  "timestep": t,
                  "encoder_hidden_states": _empty(batch, tokens, cfg.caption_channels,
                                                  dtype=dtype)}
    elif name == "AutoencoderKLWan":
        z = _empty(batch, cfg.z_dim, (frames - 1) // 4 + 1, h, w, dtype=dtype)
        return Step({"z": z}, batch, unit, method="decode")
    else:  # AutoencoderKL
        z = _empty(batch, cfg.latent_channels, h, w, dtype=dtype)
        return Step({"z": z}, batch, unit, method="decode")
    return Step(kwargs, batch, unit)
