"""Tiny models built from configs (nothing is downloaded), saved so that the real
``from_pretrained`` path loads them: for the tour, the benchmarks and the notebooks; and the
embedded models, trained here and shipped in the package: the digits model
(``digits_pipeline``), the character-level text model (``chars_model``), the text-to-image Flux
pipeline (:mod:`.shapes`) and the text-to-video Latte pipeline (:mod:`.clips`)."""

from __future__ import annotations

from pathlib import Path

from .. import _install

#: The tiny Llama of the tour and the benchmarks ("tiny-Llama" in the README's figures).
TINY_LLAMA = {
    "vocab_size": 256,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 256,
}


def save_tiny_llama(folder: str | Path, seed: int = 0, **config) -> Path:
    """Build the tiny Llama with random weights (seeded) and ``save_pretrained`` it to
    ``folder``; keyword arguments change its config (``num_key_value_heads=4`` splits over 4
    chips; the default's 2 key/value heads split over 1 or 2). Needs
    ``pip install 'tpu-lab[hf]'``."""
    try:
        import torch
        from transformers import LlamaConfig, LlamaForCausalLM
    except ImportError as exc:
        raise ImportError(f"The tiny Llama needs transformers: {_install.hint('hf')}") from exc
    torch.manual_seed(seed)
    LlamaForCausalLM(LlamaConfig(**{**TINY_LLAMA, **config})).save_pretrained(folder)
    return Path(folder)


def digits_pipeline(device: str = "tpu", path: str | Path | None = None):
    """The embedded handwritten-digits diffusion pipeline (``DigitsPipeline``), loaded with
    ``from_pretrained`` from the package (or from ``path``) onto ``device``; needs
    ``pip install 'tpu-lab[hf]'``. ``pipe(class_labels=[7], num_inference_steps=32)``."""
    from .digits import digits_pipeline as load

    return load(device=device, path=path)


def chars_model(device: str = "tpu", path: str | Path | None = None):
    """The embedded character-level text model and its tokenizer, ``(model, tokenizer)``,
    loaded with ``AutoModelForCausalLM.from_pretrained`` from the package (or from ``path``)
    onto ``device``; needs ``pip install 'tpu-lab[hf]'``. ``tokenizer.encode("Beautiful")``."""
    from .chars import chars_model as load

    return load(device=device, path=path)
