"""The embedded text-to-video model: a tiny Latte pipeline that animates coloured shapes.

Trained by ``scripts/train_clips.py`` (on the "tpu" device) on captioned clips from
:mod:`tpu_lab.models.shapes_world` (one object moving, growing or changing colour over
:data:`FRAMES` frames) and shipped in ``tpu_lab/models/clips/`` as an ordinary Diffusers
``LattePipeline`` folder, every part a standard Hugging Face class in a tiny configuration:

- ``transformer/``: ``LatteTransformer3DModel`` (4 heads of 32, 4 spatial and 4 temporal blocks;
  patches of 2 x 2 latent pixels, so a frame is 4 x 4 = 16 tokens). Its positions are absolute:
  sine-cosine embeddings of the place in the frame and of the frame in the clip, added to the
  tokens, so a token knows which side of the frame it is on. The Wan transformer before it had
  only rotary positions (offsets between places): it could not tell left from right, and moved
  the object the way the noise leaned (8 of 16 directions; mirrored noise gave a mirrored clip).
  Absolute positions let the direction word count once training drew half its times from the
  noisiest fifth, where the start is decided (``scripts/train_clips.py --high-noise``;
  :func:`direction_weight` measures the word's pull);
- ``vae/``: the image model's ``AutoencoderKL`` (:mod:`.shapes`): a frame of this world is a
  picture of the image model's world, and ``LattePipeline`` decodes frame by frame (a 32x32
  frame is 8x8 latent pixels of 8 channels). Its encoder is the image model's, byte for byte
  (the latents the transformer learned); its decoder was trained a further 10 minutes on the
  clips' frames, from latents with a little noise added (``scripts/train_clips.py
  --decoder-minutes 10 --decoder-noise 0.3``), so it draws the corners the judge looks for from
  the transformer's slightly-off latents;
- ``text_encoder/`` + ``tokenizer/``: ``T5EncoderModel`` started from the image model's T5 and
  trained on with the transformer; the image model's word-level tokenizer
  (:func:`tpu_lab.models.shapes.build_tokenizer`);
- ``scheduler/``: ``UniPCMultistepScheduler`` with flow sigmas (rectified flow, as Wan 2.1
  ships it).

Latte predicts a learned variance beside the noise: ``LattePipeline`` keeps the first half of
the transformer's output channels unless the scheduler learns a variance, so the model has
2 x 8 output channels, of which training fits the first 8 (the second half is never used).
LattePipeline pads every prompt to 120 tokens; for one prompt it cuts the text at the prompt's
end, for several it zeroes the states past each prompt's end. Training shows the model both.

**Its tensor-parallel plan.** Diffusers ships a ``_tp_plan`` for Flux and Qwen-Image, not for
Latte; as the announcement tells users to do, a model without one gets one by defining it:
:class:`LatteTransformerTP` is ``LatteTransformer3DModel`` with :data:`TP_PLAN`, so
``LatteTransformerTP.from_pretrained(..., parallel_config=TensorParallelConfig(tp_degree=4))``
shards it. The plan shards every block's feed-forward (``ff.net.0.proj`` by columns,
``ff.net.2`` by rows: one all-reduce per block) and keeps attention whole: Latte's blocks use
Diffusers' generic ``Attention``, whose processor splits heads by ``attn.heads`` (the global
count, 4), so a chip holding a quarter of the query columns would cut them into 4 heads of 8
instead of 1 head of 32 and compute other numbers; Flux's processor splits by the head size and
shards cleanly.

:func:`clips_pipeline` loads it with ``LattePipeline.from_pretrained``; call it with
:data:`CALL`. :func:`follows_direction` checks whether the object moves the way the direction
word says; :func:`follows_the_noise` checks what the model takes from the noise instead
(mirrored noise, mirrored clip: the Wan model's failure).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from . import shapes
from . import shapes_world as world

#: The pipeline folder shipped inside the package, and the script that writes it.
FOLDER = Path(__file__).with_name("clips")
SCRIPT = "scripts/train_clips.py"
#: Frames of a generated clip (:data:`shapes_world.FRAMES`, Latte's ``video_length``).
FRAMES = world.FRAMES
#: Pass these to the pipeline: the size the model was trained at, the frame count (Latte's
#: temporal positions are made for exactly this many), and no caption cleaning (LattePipeline's
#: default asks for bs4 and ftfy and warns without them; these prompts need none).
CALL: dict[str, Any] = {"height": world.SIZE, "width": world.SIZE, "video_length": FRAMES,
                        "clean_caption": False}  # fmt: skip
#: Denoising steps and guidance (LattePipeline's ``guidance_scale`` with ``negative_prompt=""``)
#: of the demos and tests, chosen with the scheduler's shift by ``scripts/tune_clips.py`` on 200
#: prompts the tests do not use (169 of 200 honoured, 168 at guidance 2; before the decoder was
#: tuned on clips, 164 and 159); the judge passes 84 of the tests' 100 random prompts.
STEPS = 20
GUIDANCE = 3.0

#: Latent channels: the image model's VAE (a 32x32 frame is 8x8 latent pixels of 8 channels).
Z = 8
TRANSFORMER_CONFIG: dict[str, Any] = {
    "num_attention_heads": 4,
    "attention_head_dim": 32,
    "in_channels": Z,
    "out_channels": 2 * Z,  # the noise and Latte's learned variance (unused, see above)
    "num_layers": 4,
    "cross_attention_dim": 128,
    "attention_bias": True,
    "sample_size": world.SIZE // 4,  # latent pixels a side
    "patch_size": 2,
    "activation_fn": "gelu-approximate",
    "num_embeds_ada_norm": 1000,
    "norm_type": "ada_norm_single",
    "norm_elementwise_affine": False,
    "norm_eps": 1e-6,
    "caption_channels": shapes.T5_CONFIG["d_model"],
    "video_length": FRAMES,
}
#: Rectified flow through UniPC (the transformer predicts ``noise - x_0``; timesteps are
#: ``1000 t``), its sigmas shifted toward the noisy end (``flow_shift`` 3, as Wan 2.1 ships it
#: at 3 to 5): more steps where the shape and the start are decided (``scripts/tune_clips.py``:
#: 164 of 200 at guidance 3, 158 unshifted).
SCHEDULER_CONFIG: dict[str, Any] = {
    "num_train_timesteps": 1000,
    "use_flow_sigmas": True,
    "prediction_type": "flow_prediction",
    "flow_shift": 3.0,
}

#: The user-defined tensor-parallel plan of :class:`LatteTransformerTP` (see the module's text).
TP_PLAN: dict[str, str] = {
    f"{blocks}.*.ff.{layer}": style
    for blocks in ("transformer_blocks", "temporal_transformer_blocks")
    for layer, style in (("net.0.proj", "colwise"), ("net.2", "rowwise"))
}


def _tp_class():
    """:class:`LatteTransformerTP`, made on first use (it subclasses a Diffusers class, and
    importing this module does not import Diffusers)."""
    cls = globals().get("LatteTransformerTP")
    if cls is None:
        from diffusers import LatteTransformer3DModel

        class LatteTransformerTP(LatteTransformer3DModel):
            """``LatteTransformer3DModel`` with a tensor-parallel plan (:data:`TP_PLAN`)."""

            _tp_plan = TP_PLAN

        LatteTransformerTP.__module__ = __name__
        cls = globals()["LatteTransformerTP"] = LatteTransformerTP
    return cls


def __getattr__(name: str):
    if name == "LatteTransformerTP":
        return _tp_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def build_components(seed: int = 0) -> dict[str, Any]:
    """The pipeline's components before training, as LattePipeline takes them: a fresh
    transformer (random weights, seeded), and the embedded image model's VAE and T5 text
    encoder."""
    import torch
    from diffusers import AutoencoderKL, LatteTransformer3DModel, UniPCMultistepScheduler
    from transformers import T5EncoderModel

    folder = shapes.FOLDER
    torch.manual_seed(seed)
    return {
        "tokenizer": shapes.build_tokenizer(),
        "text_encoder": T5EncoderModel.from_pretrained(folder / "text_encoder_2"),
        "vae": AutoencoderKL.from_pretrained(folder / "vae"),
        "scheduler": UniPCMultistepScheduler(**SCHEDULER_CONFIG),
        "transformer": LatteTransformer3DModel(**TRANSFORMER_CONFIG),
    }


#: The objects of :func:`follows_direction`, each asked to move in the four directions.
DIRECTION_OBJECTS = ("a large red circle", "a small blue square", "a large green triangle",
                     "a small yellow circle")  # fmt: skip


def _noise(count: int, seed: int):
    """Initial latents for ``count`` clips, ``(count, Z, FRAMES, 8, 8)``."""
    import torch

    latent = TRANSFORMER_CONFIG["sample_size"]
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
    object's four prompts from the same noise; counts the clips whose object travelled at least
    ``shapes_world.MIN_TRAVEL`` pixels "the word's way", "the other way", "too little" (as
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
    whose two clips travel at least :data:`shapes_world.MIN_TRAVEL` pixels in opposite directions
    (the side the object starts from is the noise's, whatever the word says). The four objects
    growing (by at least :data:`shapes_world.MIN_GROWTH` pixels, the judge's rule) from that
    noise and from it reversed in time: "grows" and "grows with the noise reversed" (the model
    knows which frame comes first)."""
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


def direction_weight(pipe, t: float = 0.999, n: int = 8, seed: int = 0) -> dict[str, float]:
    """How much the transformer's prediction from (nearly) pure noise, at time ``t``, changes
    when one word of "a large red circle moving right on a black background" changes:
    "right/left" (the direction: which side the object starts from) and "right/up" (the axis),
    each the relative difference over ``n`` noises, in percent. Near 0 for "right/left": the
    transformer does not let the direction word decide where the object starts."""
    import torch

    channels = pipe.transformer.config.in_channels
    noise = _noise(n, seed).to(pipe.device)
    timestep = torch.full((n,), t * 1000, device=pipe.device)

    def predict(word: str):
        prompts = [f"a large red circle moving {word} on a black background"] * n
        states = pipe.encode_prompt(prompts, do_classifier_free_guidance=False,
                                    clean_caption=False, device=pipe.device)[0]  # fmt: skip
        return pipe.transformer(hidden_states=noise, timestep=timestep,
                                encoder_hidden_states=states,
                                return_dict=False)[0][:, :channels]  # fmt: skip

    with torch.no_grad():
        right, left, up = (predict(w) for w in ("right", "left", "up"))
    return {f"right/{w}": round(100 * float((right - o).norm() / right.norm()), 2)
            for w, o in (("left", left), ("up", up))}  # fmt: skip


def clips_pipeline(device: str = "tpu", path: str | Path | None = None, **kwargs):
    """The embedded video pipeline: ``LattePipeline.from_pretrained`` on the package's folder
    (or ``path``), moved to ``device``; keyword arguments go to ``from_pretrained``. Call it with
    :data:`CALL`: ``pipe("a small red circle moving right on a black background", **CALL)``
    gives ``.frames[0]``, 16 frames of 32x32."""
    return shapes.load_pipeline("LattePipeline", path or FOLDER, SCRIPT, device, **kwargs)


def tp_pipeline(path: str | Path | None = None, tp_degree: int = 4, device: str = "tpu",
                **kwargs):  # fmt: skip
    """The announcement's recipe for a model without a plan in Diffusers, to run on every rank
    of a cluster: the transformer loaded as :class:`LatteTransformerTP`
    (``LatteTransformer3DModel`` plus :data:`TP_PLAN`) with
    ``parallel_config=TensorParallelConfig(tp_degree=tp_degree)``, into the pipeline, moved to
    ``device``. Keyword arguments (``dtype=``) go to both ``from_pretrained`` calls."""
    return shapes.load_pipeline("LattePipeline", path or FOLDER, SCRIPT, device, _tp_class(),
                                tp_degree, **kwargs)  # fmt: skip
