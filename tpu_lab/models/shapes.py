"""The embedded text-to-image model: a tiny Flux pipeline that draws coloured shapes.

Trained by ``scripts/train_shapes.py`` (on the "tpu" device) on captioned scenes from
:mod:`tpu_lab.models.shapes_world` and shipped in ``tpu_lab/models/shapes/`` as an ordinary
Diffusers ``FluxPipeline`` folder, every part a standard Hugging Face class in a tiny
configuration:

- ``transformer/``: ``FluxTransformer2DModel`` (the family whose ``_tp_plan`` Diffusers ships,
  so ``TensorParallelConfig(tp_degree=4)`` shards it: 4 heads of 32, one per chip);
- ``vae/``: ``AutoencoderKL`` with three levels, trained here (:func:`build_vae`): a 32x32 image
  is 8x8 latent pixels of 8 channels, which Flux packs 2x2 into 16 tokens of 32 values;
- ``text_encoder/`` + ``tokenizer/``: ``CLIPTextModel`` (its pooled output) and
  ``text_encoder_2/`` + ``tokenizer_2/``: ``T5EncoderModel`` (its token states), both with a
  word-level ``PreTrainedTokenizerFast`` built locally over the world's words (saved by
  transformers 5 as ``TokenizersBackend``; Flux's own CLIP BPE and T5 SentencePiece
  vocabularies would be megabytes, and Diffusers loads whichever tokenizer class
  ``model_index.json`` names);
- ``scheduler/``: ``FlowMatchEulerDiscreteScheduler`` (rectified flow, as Flux).

:func:`shapes_pipeline` loads it with ``FluxPipeline.from_pretrained``. Two of FluxPipeline's
defaults suit the 12-billion-parameter original, not this model: pass :data:`CALL` (``height``
and ``width`` 32, ``max_sequence_length`` 16: Flux pads prompts to that many T5 tokens without a
mask, so the model only knows the length it was trained with). Classifier-free guidance is
FluxPipeline's ``true_cfg_scale`` with ``negative_prompt=""`` (the model was trained with 10% empty
captions; Flux's ``guidance_scale`` is a distilled-guidance input that this model, like
FLUX.1-schnell, does not have).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import ShapesModelError
from . import shapes_world as world

#: The pipeline folder shipped inside the package.
FOLDER = Path(__file__).with_name("shapes")
#: Prompt tokens (FluxPipeline's ``max_sequence_length``; captions are at most 13 with ``</s>``).
TOKENS = 16
#: Pass these to the pipeline: the size the model was trained at and its prompt length.
CALL: dict[str, Any] = {"height": world.SIZE, "width": world.SIZE, "max_sequence_length": TOKENS}
#: Denoising steps of the demos and tests, and the guidance they use (``true_cfg_scale`` with
#: ``negative_prompt=""``). The shipped weights (scripts/train_shapes.py from scratch: the VAE for
#: 15 minutes, then 11,856 transformer steps of 64 scenes in 55 minutes) pass the judge on 90 of
#: 100 random prompts at guidance 2, 84 at 3 and 81 without guidance.
STEPS = 20
GUIDANCE = 2.0
SPECIALS = ("<pad>", "</s>", "<unk>")

#: The VAE: three levels, so a 32x32 image is 8x8 latent pixels of 8 channels (Flux packs 2x2 of
#: them per token: 16 tokens of 32 values). Trained by ``scripts/train_shapes.py``.
VAE_CONFIG: dict[str, Any] = {
    "in_channels": 3,
    "out_channels": 3,
    "down_block_types": ("DownEncoderBlock2D",) * 3,
    "up_block_types": ("UpDecoderBlock2D",) * 3,
    "block_out_channels": (16, 32, 32),
    "layers_per_block": 1,
    "latent_channels": 8,
    "norm_num_groups": 8,
    "mid_block_add_attention": False,
    "sample_size": world.SIZE,
}
TRANSFORMER_CONFIG: dict[str, Any] = {
    "patch_size": 1,
    "in_channels": 32,  # 8 latent channels x a 2x2 patch (Flux packs latents)
    "num_layers": 2,
    "num_single_layers": 2,
    "attention_head_dim": 32,
    "num_attention_heads": 4,
    "joint_attention_dim": 64,  # the T5 width
    "pooled_projection_dim": 64,  # the CLIP width
    "guidance_embeds": False,
    # RoPE dimensions per position axis (image index, row, column): the first is always 0 in
    # text-to-image, so all 32 go to the rows and columns
    "axes_dims_rope": (0, 16, 16),
}
CLIP_CONFIG: dict[str, Any] = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "max_position_embeddings": TOKENS,
    "projection_dim": 64,
    "pad_token_id": 0,
    "eos_token_id": 1,  # the pooled output is the state at the first </s>
    "bos_token_id": 1,
}
T5_CONFIG: dict[str, Any] = {
    "d_model": 64,
    "d_kv": 16,
    "d_ff": 128,
    "num_layers": 2,
    "num_heads": 4,
    "relative_attention_num_buckets": 8,
    "relative_attention_max_distance": TOKENS,
    "feed_forward_proj": "gated-gelu",
    "pad_token_id": 0,
    "eos_token_id": 1,
    "decoder_start_token_id": 0,
}
SCHEDULER_CONFIG: dict[str, Any] = {"num_train_timesteps": 1000, "shift": 1.0,
                                    "use_dynamic_shifting": False}  # fmt: skip


def build_tokenizer(max_length: int = TOKENS):
    """A word-level ``PreTrainedTokenizerFast`` over :data:`shapes_world.WORDS` that appends
    ``</s>``; unknown words become ``<unk>``."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate((*SPECIALS, *world.WORDS))}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(
        single="$A </s>", pair="$A </s> $B </s>", special_tokens=[("</s>", 1)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", eos_token="</s>", unk_token="<unk>",
        model_max_length=max_length,
    )  # fmt: skip


def build_vae(seed: int = 0):
    """An untrained ``AutoencoderKL`` of :data:`VAE_CONFIG` (``scripts/train_shapes.py`` trains
    it first, then sets its ``shift_factor``/``scaling_factor`` from the latents)."""
    import torch
    from diffusers import AutoencoderKL

    torch.manual_seed(seed)
    return AutoencoderKL(**VAE_CONFIG)


def build_components(seed: int = 0) -> dict[str, Any]:
    """Untrained components of the pipeline (random weights, seeded), as FluxPipeline takes
    them."""
    import torch
    from diffusers import FlowMatchEulerDiscreteScheduler, FluxTransformer2DModel
    from transformers import CLIPTextConfig, CLIPTextModel, T5Config, T5EncoderModel

    tokenizer = build_tokenizer()
    vocab = len(tokenizer)
    torch.manual_seed(seed)
    return {
        "vae": build_vae(seed),
        "text_encoder": CLIPTextModel(CLIPTextConfig(vocab_size=vocab, **CLIP_CONFIG)),
        "tokenizer": tokenizer,
        "text_encoder_2": T5EncoderModel(T5Config(vocab_size=vocab, **T5_CONFIG)),
        "tokenizer_2": build_tokenizer(),
        "transformer": FluxTransformer2DModel(**TRANSFORMER_CONFIG),
        "scheduler": FlowMatchEulerDiscreteScheduler(**SCHEDULER_CONFIG),
    }


def load_pipeline(pipeline_class: str, folder: Path, script: str, device: str | None,
                  transformer_class=None, tp_degree: int | None = None, **kwargs):  # fmt: skip
    """``diffusers.<pipeline_class>.from_pretrained(folder, **kwargs)`` moved to ``device``; with
    ``tp_degree``, its transformer loaded first by ``transformer_class`` with
    ``parallel_config=TensorParallelConfig(tp_degree=tp_degree)`` (keyword arguments go to both
    ``from_pretrained`` calls). A folder without ``model_index.json`` is refused, naming
    ``script``, which writes one."""
    import diffusers

    folder = Path(folder)
    if not (folder / "model_index.json").is_file():
        raise ShapesModelError(
            f"{folder} is not a diffusers pipeline folder (no model_index.json): pass the "
            f"folder written by {script}."
        )
    if tp_degree is not None:
        kwargs["transformer"] = transformer_class.from_pretrained(
            folder, subfolder="transformer", **kwargs,
            parallel_config=diffusers.TensorParallelConfig(tp_degree=tp_degree),
        )  # fmt: skip
    pipe = getattr(diffusers, pipeline_class).from_pretrained(folder, **kwargs)
    return pipe.to(device) if device is not None else pipe


def shapes_pipeline(device: str = "tpu", path: str | Path | None = None, **kwargs):
    """The embedded shapes pipeline: ``FluxPipeline.from_pretrained`` on the package's folder
    (or ``path``), moved to ``device``; keyword arguments go to ``from_pretrained``
    (``dtype=torch.bfloat16``, ``transformer=...``). Call it with :data:`CALL`:
    ``pipe("a red circle in the centre on a black background", **CALL)``."""
    return load_pipeline("FluxPipeline", path or FOLDER, "scripts/train_shapes.py", device,
                         **kwargs)  # fmt: skip


def tp_pipeline(path: str | Path | None = None, tp_degree: int = 4, device: str = "tpu",
                **kwargs):  # fmt: skip
    """The announcement's recipe, to run on every rank of a cluster (``%%tpu spmd``): the
    transformer loaded with ``from_pretrained(...,
    parallel_config=TensorParallelConfig(tp_degree=tp_degree))`` (Diffusers' ``_tp_plan`` for
    Flux) into the pipeline, moved to ``device``. Keyword arguments (``dtype=``) go to both
    ``from_pretrained`` calls."""
    from diffusers import FluxTransformer2DModel

    return load_pipeline("FluxPipeline", path or FOLDER, "scripts/train_shapes.py", device,
                         FluxTransformer2DModel, tp_degree, **kwargs)  # fmt: skip
