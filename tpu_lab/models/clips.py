"""The embedded text-to-video model: a tiny Wan pipeline that animates coloured shapes.

Trained by ``scripts/train_clips.py`` (on the "tpu" device) on captioned clips from
:mod:`tpu_lab.models.shapes_world` (one object moving, growing or changing colour over
:data:`FRAMES` frames) and shipped in ``tpu_lab/models/clips/`` as an ordinary Diffusers
``WanPipeline`` folder, every part a standard Hugging Face class in a tiny configuration:

- ``transformer/``: ``WanTransformer3DModel`` (4 heads of 48, 4 blocks; patches of 1 frame x 2 x 2
  latent pixels, so a clip is 17 x 4 x 4 = 272 tokens);
- ``vae/``: ``AutoencoderKLWan`` with Wan 2.2's ``patch_size=2`` (2x2 pixels into 12 channels)
  and two levels: a 32x32 frame becomes 8x8 latent pixels of 8 channels. Trained here on single
  frames, it codes each frame on its own (:func:`build_vae`); no temporal compression, so every
  one of the 17 frames has its latent;
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
:func:`follows_direction` checks what the shipped weights get wrong most: whether the object
moves the way the direction word says (they ignore the word: 8 of 16); :func:`follows_the_noise`
shows why: mirrored noise gives a mirrored clip (the transformer's rotary positions give it
offsets between places in a frame, no absolute side), while growing survives noise reversed in
time.
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
#: of the demos and tests: the shipped weights pass the judge on 54 of 100 prompts at guidance 3,
#: 39 without guidance (1), 49 at guidance 5.
STEPS = 20
GUIDANCE = 3.0

#: ``AutoencoderKLWan``: Wan 2.2's 2x2 pixel patches in, two levels (4x smaller: a 32x32 frame
#: is 8x8 latent pixels of 8 channels), no temporal compression; trained, frame by frame.
Z = 8
VAE_CONFIG: dict[str, Any] = {
    "base_dim": 16,
    "z_dim": Z,
    "dim_mult": [1, 2],
    "num_res_blocks": 1,
    "attn_scales": [],
    "temperal_downsample": [False],
    "in_channels": 12,
    "out_channels": 12,
    "patch_size": 2,
    "scale_factor_temporal": 1,
    "scale_factor_spatial": 4,
    "latents_mean": [0.0] * Z,
    "latents_std": [1.0] * Z,
}
TRANSFORMER_CONFIG: dict[str, Any] = {
    "patch_size": (1, 2, 2),
    # 4 heads of 48: a token carries 8 channels x 2 x 2 latent pixels = 32 values (4 x 4 frame
    # pixels); the width leaves room beside them for what the model must know (Wan has no skip
    # from input to output, and the pixel-space design before this one, 192 values a token at
    # width 192, left noise in every frame and passed the judge on 1 prompt of 100)
    "num_attention_heads": 4,
    "attention_head_dim": 48,
    "in_channels": Z,
    "out_channels": Z,
    "text_dim": 64,  # the UMT5 width
    "freq_dim": 64,
    "ffn_dim": 512,
    "num_layers": 4,
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


def build_vae(seed: int = 0):
    """An untrained ``AutoencoderKLWan`` of :data:`VAE_CONFIG` that works frame by frame: in each
    causal 3x3x3 convolution the two taps that read earlier frames are zero. Trained on single
    frames (``scripts/train_clips.py``), they stay zero (a lone frame's causal padding is zero,
    so their gradient is), and the VAE then codes every frame of a clip on its own."""
    import torch
    from diffusers import AutoencoderKLWan

    torch.manual_seed(seed)
    vae = AutoencoderKLWan(**VAE_CONFIG)
    with torch.no_grad():
        for module in vae.modules():
            if isinstance(module, torch.nn.Conv3d) and module.kernel_size[0] == 3:
                module.weight[:, :, :2] = 0.0
    return vae


def build_components(seed: int = 0) -> dict[str, Any]:
    """Untrained components of the pipeline (random weights, seeded), as WanPipeline takes
    them (the VAE's ``latents_mean``/``latents_std`` are set once it is trained)."""
    import torch
    from diffusers import FlowMatchEulerDiscreteScheduler, WanTransformer3DModel
    from transformers import UMT5Config, UMT5EncoderModel

    tokenizer = shapes.build_tokenizer()
    torch.manual_seed(seed)
    return {
        "tokenizer": tokenizer,
        "text_encoder": UMT5EncoderModel(UMT5Config(vocab_size=len(tokenizer), **UMT5_CONFIG)),
        "vae": build_vae(seed),
        "scheduler": FlowMatchEulerDiscreteScheduler(**SCHEDULER_CONFIG),
        "transformer": WanTransformer3DModel(**TRANSFORMER_CONFIG),
    }


#: The objects of :func:`follows_direction`, each asked to move in the four directions.
DIRECTION_OBJECTS = ("a large red circle", "a small blue square", "a large green triangle",
                     "a small yellow circle")  # fmt: skip


def _noise(count: int, seed: int):
    """Initial latents for ``count`` clips, ``(count, Z, FRAMES, 8, 8)``."""
    import torch

    latent = world.SIZE // VAE_CONFIG["scale_factor_spatial"]
    return torch.randn((count, Z, FRAMES, latent, latent),
                       generator=torch.Generator().manual_seed(seed))  # fmt: skip


def _ends(pipe, prompts: list[str], latents, guidance: float) -> list[tuple[Any, Any]]:
    """Each prompt's clip from its ``latents``: the object's blob (``shapes_world.blob_of``, in
    the prompt's first colour) in the first and in the last frame, None where it is missing."""
    videos = pipe(prompts, latents=latents, negative_prompt=[""] * len(prompts),
                  guidance_scale=guidance, num_inference_steps=STEPS, output_type="np",
                  **CALL).frames  # fmt: skip
    return [tuple(world.blob_of(world._as_uint8(f), world.parse(p).objects[0][0])
                  for f in (video[0], video[-1]))
            for p, video in zip(prompts, videos, strict=True)]  # fmt: skip


def follows_direction(pipe, seed: int = 7, guidance: float = GUIDANCE) -> dict[str, int]:
    """Does ``pipe`` move the object the way the direction word says? Each object of
    :data:`DIRECTION_OBJECTS` with each direction of ``shapes_world.TRAVEL`` (16 prompts), an
    object's four prompts from the same noise; counts the clips whose object travelled
    ``shapes_world.MIN_TRAVEL``+ pixels "the word's way", "the other way", "too little" (as
    :func:`shapes_world.judge_clip` measures it), or had "no object" in the first or last
    frame."""
    prompts = [f"{o} {d} on a black background" for o in DIRECTION_OBJECTS for d in world.TRAVEL]
    noise = _noise(len(DIRECTION_OBJECTS), seed).repeat_interleave(len(world.TRAVEL), dim=0)
    counts = dict.fromkeys(("the word's way", "the other way", "too little", "no object"), 0)
    for prompt, (start, end) in zip(prompts, _ends(pipe, prompts, noise, guidance), strict=True):
        if start is None or end is None:
            counts["no object"] += 1
            continue
        moved = world.travel(start, end, world.parse(prompt).motion)
        counts["the word's way" if moved >= world.MIN_TRAVEL else "the other way"
               if moved <= -world.MIN_TRAVEL else "too little"] += 1  # fmt: skip
    return counts


def follows_the_noise(pipe, seed: int = 7, guidance: float = GUIDANCE) -> dict[str, int]:
    """What ``pipe`` takes from the noise rather than from the prompt. Each object of
    :data:`DIRECTION_OBJECTS` moving right and moving down (8 prompts) from noise and from the
    same noise mirrored along the motion's axis: "mirrored with the noise" counts the prompts
    whose two clips travel :data:`shapes_world.MIN_TRAVEL`+ pixels in opposite directions (the
    side the object starts from is the noise's, whatever the word says). The four objects
    growing (by :data:`shapes_world.MIN_GROWTH`+ pixels, the judge's rule) from that noise and
    from it reversed in time: "grows" and "grows with the noise reversed" (the model knows
    which frame comes first)."""
    moving = [f"{o} {d} on a black background" for d in ("moving right", "moving down")
              for o in DIRECTION_OBJECTS]  # fmt: skip
    noise = _noise(len(DIRECTION_OBJECTS), seed).repeat(2, 1, 1, 1, 1)
    half = len(DIRECTION_OBJECTS)
    mirrored = noise.clone()
    mirrored[:half] = noise[:half].flip(-1)  # left-right, for "moving right"
    mirrored[half:] = noise[half:].flip(-2)  # top-bottom, for "moving down"
    counts = {"mirrored with the noise": 0}
    for prompt, ends, flipped in zip(moving, _ends(pipe, moving, noise, guidance),
                                     _ends(pipe, moving, mirrored, guidance), strict=True):
        if None in ends or None in flipped:
            continue
        motion = world.parse(prompt).motion
        a, b = world.travel(*ends, motion), world.travel(*flipped, motion)
        counts["mirrored with the noise"] += min(abs(a), abs(b)) >= world.MIN_TRAVEL and a * b < 0
    growing = [f"{o.replace('large ', '').replace('small ', '')} growing on a black background"
               for o in DIRECTION_OBJECTS]  # fmt: skip
    for name, latents in (("grows", noise[:half]), ("grows with the noise reversed",
                                                     noise[:half].flip(2))):
        counts[name] = sum(start is not None and end is not None
                           and end.extent - start.extent >= world.MIN_GROWTH
                           for start, end in _ends(pipe, growing, latents, guidance))  # fmt: skip
    return counts


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
