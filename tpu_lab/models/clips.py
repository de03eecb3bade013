"""The embedded text-to-video model: a tiny Wan pipeline that animates coloured shapes.

Trained by ``scripts/train_clips.py`` (on the "tpu" device) on captioned clips from
:mod:`tpu_lab.models.shapes_world` (one object moving, growing or changing colour over
:data:`FRAMES` frames) and shipped in ``tpu_lab/models/clips/`` as an ordinary Diffusers
``WanPipeline`` folder, every part a standard Hugging Face class in a tiny configuration:

- ``transformer/``: ``WanTransformer3DModel`` (4 heads of 48, 3 blocks; patches of 1 frame x 4 x 4
  latent pixels, so a clip is 17 x 4 x 4 = 272 tokens);
- ``vae/``: ``AutoencoderKLWan`` with Wan 2.2's ``patch_size=2`` (2x2 pixels into 12 channels)
  and one level, its weights set (not trained) to pass the pixels through
  (:func:`pixel_vae`), as the image model's VAE does;
- ``text_encoder/`` + ``tokenizer/``: ``UMT5EncoderModel`` with the image model's word-level
  tokenizer (:func:`tpu_lab.models.shapes.build_tokenizer`);
- ``scheduler/``: ``FlowMatchEulerDiscreteScheduler`` (rectified flow, as Wan).

**Its tensor-parallel plan.** Diffusers ships a ``_tp_plan`` for Flux and Qwen-Image, not for
Wan (only a context-parallel ``_cp_plan``); as the announcement tells users to do, a model
without one gets one by defining it: :class:`WanTransformerTP` is ``WanTransformer3DModel``
with :data:`TP_PLAN`, so ``WanTransformerTP.from_pretrained(...,
parallel_config=TensorParallelConfig(tp_degree=4))`` shards it. The plan shards each block's
feed-forward (``ffn.net.0.proj`` by columns, ``ffn.net.2`` by rows: one all-reduce per block)
and keeps attention whole. Wan's attention cannot be split by heads with Diffusers' styles: its
``norm_q``/``norm_k`` are RMSNorms across *all* heads (over the whole inner dimension), so a
chip holding a quarter of the heads would normalise by the wrong sum, and ``WanAttnProcessor``
splits heads by ``attn.heads`` (the global count), not by the head size as Flux's does.

:func:`clips_pipeline` loads it with ``WanPipeline.from_pretrained``; call it with :data:`CALL`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from . import shapes
from . import shapes_world as world

#: The pipeline folder shipped inside the package, and the script that writes it.
FOLDER = Path(__file__).with_name("clips")
SCRIPT = "scripts/train_clips.py"
#: Frames of a generated clip (:data:`shapes_world.FRAMES`).
FRAMES = world.FRAMES
#: Pass these to the pipeline: the size the model was trained at, its prompt length, and the
#: frame count. Diffusers' WanPipeline rounds ``num_frames`` to ``k * t + 1`` for the VAE's
#: temporal factor ``t``; this VAE has none (``t`` 1), so it always adds one frame: asking for
#: 16 gives the 17 the model was trained on (WanPipeline logs that it rounded).
CALL: dict[str, Any] = {"height": world.SIZE, "width": world.SIZE, "num_frames": FRAMES - 1,
                        "max_sequence_length": shapes.TOKENS}  # fmt: skip
#: Denoising steps and guidance (WanPipeline's ``guidance_scale`` with ``negative_prompt=""``)
#: of the demos and tests.
STEPS = 20
GUIDANCE = 1.0

#: ``AutoencoderKLWan``: Wan 2.2's 2x2 pixel patches in, one level, no temporal compression.
VAE_CONFIG: dict[str, Any] = {
    "base_dim": 32,
    "z_dim": 12,
    "dim_mult": [1],
    "num_res_blocks": 1,
    "attn_scales": [],
    "temperal_downsample": [],
    "in_channels": 12,
    "out_channels": 12,
    "patch_size": 2,
    "scale_factor_temporal": 1,
    "scale_factor_spatial": 2,
}
TRANSFORMER_CONFIG: dict[str, Any] = {
    "patch_size": (1, 4, 4),
    # 4 heads of 48: a token carries 12 channels x 4 x 4 latent pixels = 192 values, and its
    # width must hold them all (Wan has no skip from input to output: at width 64 the noise
    # the model must hand back does not fit, and the loss stalled at 0.82 of its 2.0 start)
    "num_attention_heads": 4,
    "attention_head_dim": 48,
    "in_channels": 12,
    "out_channels": 12,
    "text_dim": 64,  # the UMT5 width
    "freq_dim": 64,
    "ffn_dim": 512,
    "num_layers": 3,
    "cross_attn_norm": True,
    "eps": 1e-6,
    "rope_max_seq_len": 64,
}
#: The text encoder: the image model's T5 configuration, as UMT5.
UMT5_CONFIG = shapes.T5_CONFIG
SCHEDULER_CONFIG = shapes.SCHEDULER_CONFIG

#: The user-defined tensor-parallel plan of :class:`WanTransformerTP` (see the module's text).
TP_PLAN: dict[str, str] = {
    "blocks.*.ffn.net.0.proj": "colwise",
    "blocks.*.ffn.net.2": "rowwise",
}


def _tp_class():
    """:class:`WanTransformerTP`, made on first use (it subclasses a Diffusers class, and
    importing this module does not import Diffusers)."""
    cls = globals().get("WanTransformerTP")
    if cls is None:
        from diffusers import WanTransformer3DModel

        class WanTransformerTP(WanTransformer3DModel):
            """``WanTransformer3DModel`` with a tensor-parallel plan (:data:`TP_PLAN`)."""

            _tp_plan = TP_PLAN

        WanTransformerTP.__module__ = __name__
        cls = globals()["WanTransformerTP"] = WanTransformerTP
    return cls


def __getattr__(name: str):
    if name == "WanTransformerTP":
        return _tp_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def pixel_vae(mean=(0.0, 0.0, 0.0), std=(1.0, 1.0, 1.0)):
    """The ``AutoencoderKLWan`` of :data:`VAE_CONFIG` with its weights set so that it passes
    pixels through: the latents are the 2x2-patched pixels (12 channels at half the size), to
    float32 rounding, with a posterior spread of e^-15. Every residual block and the attention
    add zero (their last convolution or projection is zero); the RMSNorm + SiLU + causal
    convolution at each end is made exact by the image VAE's pinning trick (see
    :func:`tpu_lab.models.shapes.pixel_vae`), with each convolution reading only its own frame.

    ``mean``/``std`` (per RGB channel) become the config's ``latents_mean``/``latents_std``:
    the transformer sees ``(latents - mean) / std`` as with Wan's own VAE."""
    import torch
    from diffusers import AutoencoderKLWan
    from diffusers.models.autoencoders.autoencoder_kl_wan import (
        WanAttentionBlock,
        WanResidualBlock,
    )

    patch = VAE_CONFIG["patch_size"] ** 2  # each RGB channel becomes 4 latent channels

    def per_latent(values) -> list[float]:
        return [float(v) for v in values for _ in range(patch)]

    vae = AutoencoderKLWan(**VAE_CONFIG, latents_mean=per_latent(mean),
                           latents_std=per_latent(std))  # fmt: skip
    z = VAE_CONFIG["z_dim"]
    with torch.no_grad():
        for module in vae.modules():
            if isinstance(module, WanResidualBlock):
                module.conv2.weight.zero_()
                module.conv2.bias.zero_()
            elif isinstance(module, WanAttentionBlock):
                module.proj.weight.zero_()
                module.proj.bias.zero_()
        for coder in (vae.encoder, vae.decoder):
            _pass_through(coder.conv_in, coder.norm_out, coder.conv_out, z)
        vae.encoder.conv_out.bias[z:] = -30.0  # log-variance: a posterior spread of e^-15
        for conv in (vae.quant_conv, vae.post_quant_conv):
            conv.weight.zero_()
            conv.weight[:, :, 0, 0, 0] = torch.eye(conv.out_channels)
            conv.bias.zero_()
    return vae


def _pass_through(conv_in, norm, conv_out, channels: int) -> None:
    """``conv_out(SiLU(norm(conv_in(x)))) == x`` for ``channels`` channels, frame by frame:
    :func:`tpu_lab.models.shapes._pass_through` for Wan's causal 3x3x3 convolutions (the tap
    that reads the current frame is the last in time, the middle in space) and its RMSNorm
    (over the channels, times the square root of their number)."""
    import torch

    now = (2, 1, 1)
    with torch.no_grad():
        for conv in (conv_in, conv_out):
            conv.weight.zero_()
            conv.bias.zero_()
        for c in range(channels):
            conv_in.weight[(2 * c, c, *now)] = 1.0
            conv_in.weight[(2 * c + 1, c, *now)] = -1.0
            conv_out.weight[(c, 2 * c, *now)] = 1.0
            conv_out.weight[(c, 2 * c + 1, *now)] = -1.0
        conv_in.bias[2 * channels] = shapes.PIN
        conv_in.bias[2 * channels + 1] = -shapes.PIN
        width = conv_in.out_channels
        # the norm divides by |x| = sqrt(2) PIN and multiplies by sqrt(width): undo both
        norm.gamma.fill_(2**0.5 * shapes.PIN / width**0.5)


def build_components(seed: int = 0, mean=(0.0, 0.0, 0.0), std=(1.0, 1.0, 1.0)) -> dict[str, Any]:
    """Untrained components of the pipeline (random weights, seeded), as WanPipeline takes
    them."""
    import torch
    from diffusers import FlowMatchEulerDiscreteScheduler, WanTransformer3DModel
    from transformers import UMT5Config, UMT5EncoderModel

    tokenizer = shapes.build_tokenizer()
    torch.manual_seed(seed)
    return {
        "tokenizer": tokenizer,
        "text_encoder": UMT5EncoderModel(UMT5Config(vocab_size=len(tokenizer), **UMT5_CONFIG)),
        "vae": pixel_vae(mean, std),
        "scheduler": FlowMatchEulerDiscreteScheduler(**SCHEDULER_CONFIG),
        "transformer": WanTransformer3DModel(**TRANSFORMER_CONFIG),
    }


def clips_pipeline(device: str = "tpu", path: str | Path | None = None, **kwargs):
    """The embedded video pipeline: ``WanPipeline.from_pretrained`` on the package's folder (or
    ``path``), moved to ``device``; keyword arguments go to ``from_pretrained``. Call it with
    :data:`CALL`: ``pipe("a small red circle moving right on a black background", **CALL)``
    gives ``.frames[0]``, 17 frames of 32x32."""
    return shapes.load_pipeline("WanPipeline", path or FOLDER, SCRIPT, device, **kwargs)


def tp_pipeline(path: str | Path | None = None, tp_degree: int = 4, device: str = "tpu",
                **kwargs):  # fmt: skip
    """The announcement's recipe for a model without a plan in Diffusers, to run on every rank
    of a cluster: the transformer loaded as :class:`WanTransformerTP` (``WanTransformer3DModel``
    plus :data:`TP_PLAN`) with ``parallel_config=TensorParallelConfig(tp_degree=tp_degree)``,
    into the pipeline, moved to ``device``. Keyword arguments (``dtype=``) go to both
    ``from_pretrained`` calls."""
    return shapes.load_pipeline("WanPipeline", path or FOLDER, SCRIPT, device, _tp_class(),
                                tp_degree, **kwargs)  # fmt: skip
