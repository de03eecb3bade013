# ruff: noqa: E501  (notebook cells keep their own line lengths)
"""Write notebooks 04 (images and video) and 07 (the announcement's recipe on a simulated v6e-4)
from the cells below, without outputs; ``python scripts/notebooks.py run 04 07`` then executes
them and stores their outputs.

    python scripts/make_image_notebooks.py [04] [07]     (default: both)
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat

from tpu_lab.colab import setup_cell

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"

SETUP = setup_cell(("hf", "video"))  # tpu_lab/colab.py: the same first cell everywhere

NB04 = [
    ("md", """# 04 · Images and video

Generating images and video is what most people rent TPUs for. This notebook uses the text-to-image
model that ships **inside** tpu_lab: a tiny `FluxPipeline` (the family of FLUX.1, in a
configuration of half a million parameters) trained on the simulated TPU on captioned scenes of
coloured shapes (`scripts/train_shapes.py`). Every part is a standard Hugging Face class, loaded
with `from_pretrained` offline: `FluxTransformer2DModel`, `CLIPTextModel` and `T5EncoderModel`
with their tokenizers, an `AutoencoderKL`, a `FlowMatchEulerDiscreteScheduler`. It runs anywhere
in seconds and shows everything: prompts, previews, the denoising trajectory as a video, a judge
of what was drawn, and a compiled transformer with its recompile."""),
    ("code", SETUP),
    ("code", """import torch

import tpu_lab
from tpu_lab.media import Trajectory
from tpu_lab.models import shapes, shapes_world

%load_ext tpu_lab
from diffusers.utils import logging
from transformers.utils import logging as transformers_logging

logging.disable_progress_bar()  # keeps the saved notebook short
transformers_logging.set_verbosity_error()  # no notes about optional image-processor backends
transformers_logging.disable_progress_bar()
pipe = shapes.shapes_pipeline(device="tpu")  # FluxPipeline.from_pretrained(<package folder>).to("tpu")
pipe.set_progress_bar_config(disable=True)
print(type(pipe).__name__, pipe.transformer.device,
      f"{sum(p.numel() for p in pipe.transformer.parameters()):,} transformer parameters")
print(shapes.CALL)"""),
    ("md", """## Prompts in, pictures out

The model knows seven colours, three shapes, two sizes, five places, *left of* and *above*, and
two backgrounds. `shapes.CALL` holds the two arguments where this model differs from FLUX.1's
defaults: its size (32×32) and its prompt length (16 tokens: Flux pads prompts to
`max_sequence_length` without a mask, so a model only knows the length it was trained with).
Classifier-free guidance is FluxPipeline's `true_cfg_scale` against the empty prompt;
`shapes.GUIDANCE` is 2, measured: the judge below passes 90 of 100 random prompts at guidance 2,
84 at 3 and 81 without guidance."""),
    ("code", """prompts = [
    "a large red circle in the top left on a black background",
    "a small yellow square in the bottom right on a gray background",
    "a blue triangle left of a white circle on a black background",
    "a green square above a magenta triangle on a gray background",
    "a large cyan triangle in the centre on a black background",
    "a small white circle in the top right on a gray background",
]
generator = torch.Generator().manual_seed(0)
out = pipe(prompts, num_inference_steps=shapes.STEPS, generator=generator,
           negative_prompt="", true_cfg_scale=shapes.GUIDANCE, **shapes.CALL)
tpu_lab.preview(out.images, labels=[str(i) for i in range(len(prompts))])"""),
    ("md", """The world comes with a **judge**: a deterministic detector that finds each requested
colour, measures the blob's fill ratio (square, circle, triangle), its extent (small, large) and
its centre (place, relation). It passes every scene the data generator renders; on the model's
pictures it says what was honoured:"""),
    ("code", """import numpy as np

for prompt, image in zip(prompts, out.images):
    verdict = shapes_world.judge(np.asarray(image), prompt)
    print("honoured " if verdict else "missed   ", prompt, verdict.failures or "")"""),
    ("md", """## Watch it denoise

`Trajectory` collects the latents after every step through diffusers' step callback and decodes
them afterwards. Flux hands its callback *packed* latents (2×2 patches as tokens); unpack them
first, with the pipeline's own `_unpack_latents`:"""),
    ("code", """traj = Trajectory(pipe)

def capture(p, step, t, tensors):
    latents = p._unpack_latents(tensors["latents"], 32, 32, p.vae_scale_factor)
    traj(p, step, t, {"latents": latents})
    return tensors

pipe(prompts[:4], num_inference_steps=shapes.STEPS, generator=torch.Generator().manual_seed(1),
     callback_on_step_end=capture, callback_on_step_end_tensor_inputs=["latents"], **shapes.CALL)
traj.strip(8)"""),
    ("code", "traj.video(fps=8)"),
    ("md", """## Compile the transformer: once per size

The announcement's serving recipe is `pipe.transformer.compile(backend="tpu", fullgraph=True,
dynamic=False)`. The first call compiles; every later step and call with the same image size
reuses the program. A new size is a new number of image tokens, and so a recompile: the event log
says which dimension changed."""),
    ("code", """eager = pipe(prompts[:2], num_inference_steps=4, output_type="pt",
             generator=torch.Generator().manual_seed(2), **shapes.CALL).images
pipe.transformer.compile(backend="tpu", fullgraph=True, dynamic=False)

with tpu_lab.timed("first call: compiles") as first:
    pipe(prompts[:2], num_inference_steps=4, generator=torch.Generator().manual_seed(2), **shapes.CALL)
with tpu_lab.timed("second call: cached") as second:
    compiled = pipe(prompts[:2], num_inference_steps=4, output_type="pt",
                    generator=torch.Generator().manual_seed(2), **shapes.CALL).images
print(first.compilations, "compilation(s) in the first call;", second.compilations, "in the second")
print("largest difference compiled vs eager:", (compiled - eager).abs().max().item())"""),
    ("code", """pipe(prompts[:2], num_inference_steps=4, height=48, width=48, max_sequence_length=shapes.TOKENS)
%tpu explain"""),
    ("md", """## Text to video

The second embedded model is a tiny `LattePipeline` trained on clips of one shape moving,
growing or turning into another colour (`scripts/train_clips.py`): a `LatteTransformer3DModel`
(spatial and temporal blocks in turn), the image model's VAE (its decoder tuned on the clips'
frames) and word-level tokenizer, a
`T5EncoderModel` started from the image model's, and `UniPCMultistepScheduler` with flow sigmas
(rectified flow). Latte adds absolute positions to its tokens (sine-cosine embeddings of the
place in the frame and of the frame in the clip), so it knows where left is: the Wan transformer
this model replaced had only offsets between places, and moved the object the way its noise
leaned, whatever the direction word said. Its guidance is LattePipeline's `guidance_scale`
(`clips.GUIDANCE`, 3); the judge passes 84 of 100 random prompts, and every object moves the way
its direction word says (16 of 16 from shared noise), which the Wan model did only by chance.
`clips.CALL` holds its size and frame count (16: Latte's temporal positions are made for
exactly that many) and turns off LattePipeline's caption cleaning (which wants `bs4` and
`ftfy`)."""),
    ("code", """from tpu_lab.models import clips

video = clips.clips_pipeline(device="tpu")
video.set_progress_bar_config(disable=True)
clip_prompts = ["a large red circle moving right on a black background",
                "a small yellow square moving up on a gray background",
                "a blue triangle growing on a black background",
                "a large white square turning into magenta on a gray background"]
clips_out = video(clip_prompts, num_inference_steps=clips.STEPS, guidance_scale=clips.GUIDANCE,
                  output_type="np", generator=torch.Generator().manual_seed(0), **clips.CALL).frames
print(clips_out.shape, "(clips, frames, height, width, channels)")
for prompt, frames in zip(clip_prompts, clips_out):
    verdict = shapes_world.judge_clip(frames, prompt)
    print("honoured " if verdict else "missed   ", prompt, verdict.failures or "")"""),
    ("code", """tpu_lab.preview(clips_out[0], layout="THWC", fps=8)"""),
    ("md", """Every fourth frame of each clip, one clip per row:"""),
    ("code", """tpu_lab.preview(np.concatenate([np.concatenate(list(c[::4]), axis=1) for c in clips_out]))"""),
    ("md", """## The digits model and its guidance

The first embedded model, a class-conditional UNet of 8×8 handwritten digits, is still there
(`tpu_lab.models.digits_pipeline`). Its classifier-free guidance was measured: 1.5 helps a
little (0.99 of samples recognised against 0.98 without), past 2 the samples turn to speckle.
The default is 1.5 and the demo's slider stops at 2:"""),
    ("code", """from tpu_lab.models import digits_pipeline

digits = digits_pipeline(device="tpu")
digits.set_progress_bar_config(disable=True)
rows = [digits(class_labels=list(range(10)), guidance_scale=g,
               generator=torch.Generator().manual_seed(0)).images for g in (1.0, 1.5, 3.0)]
tpu_lab.preview(rows[0] + rows[1] + rows[2],
                labels=[f"{g}: {c}" for g in (1.0, 1.5, 3.0) for c in range(10)])"""),
    ("md", """## Your own models

`tpu_lab.preview` and `Trajectory` work with any diffusers pipeline: `pipe.to("tpu")`, pass
`callback_on_step_end=traj`, then `traj.video()`. Videos save as MP4 with
`tpu_lab.preview(frames, save="clip.mp4")` (inside the current folder). Notebook **07** runs the
same pipelines the way the announcement serves big ones: tensor parallel over four chips, in
bfloat16, compiled, with a plan of its own for the video model.

Next: **05 · A Gradio app from a notebook**."""),
]

NB07 = [
    ("md", """# 07 · The announcement's recipe on a simulated v6e-4

The Hugging Face × TorchTPU announcement serves image and video models on a **v6e-4** (four
TPU v6e chips, 32 GiB of HBM each) in four moves: **plan** whether the model fits, **load** it
tensor-parallel over the four chips in bfloat16
(`from_pretrained(..., parallel_config=TensorParallelConfig(tp_degree=4))`), **compile** the
transformer (`pipe.transformer.compile(backend="tpu", fullgraph=True, dynamic=False)`), and
**generate**, knowing that a new image size recompiles. This notebook rehearses exactly that,
offline, on the simulated device, with the tiny Flux pipeline that ships in tpu_lab (the same
classes as FLUX.1; Diffusers' own `_tp_plan` for Flux splits it), then with the tiny Latte video
pipeline, whose family has no plan in Diffusers: section 5 gives it one. On a real v6e-4 the
same cells run unchanged; only the model names and the timings differ."""),
    ("code", SETUP),
    ("code", """import torch

import tpu_lab
import tpu_lab.sharding as sh
from tpu_lab.models import shapes

%load_ext tpu_lab
%tpu use v6e-4
from diffusers.utils import logging
from transformers.utils import logging as transformers_logging

logging.disable_progress_bar()
transformers_logging.set_verbosity_error()  # no notes about optional image-processor backends
transformers_logging.disable_progress_bar()"""),
    ("md", """## 1 · Plan the fit

Before loading anything, plan the model on the **meta** device (shapes only). A FLUX.1-dev-sized
transformer (12 B parameters) in bfloat16 over four v6e chips, with the activations of one
1024×1024 image:"""),
    ("code", """flux_dev = {"_class_name": "FluxTransformer2DModel", "in_channels": 64, "num_layers": 19,
            "num_single_layers": 38, "attention_head_dim": 128, "num_attention_heads": 24,
            "joint_attention_dim": 4096, "pooled_projection_dim": 768, "guidance_embeds": True,
            "axes_dims_rope": [16, 56, 56]}
sh.plan(flux_dev, chips=4, generation="v6e", dtype=torch.bfloat16, image_size=(1024, 1024))"""),
    ("md", "The embedded one, read from its folder, fits anywhere; the plan shows what each chip will hold:"),
    ("code", """import json

embedded = json.loads((shapes.FOLDER / "transformer" / "config.json").read_text())
sh.plan(embedded, chips=4, generation="v6e", dtype=torch.bfloat16)"""),
    ("md", """## 2 · Load with TP=4 in bfloat16, compile, generate

`%tpu cluster start v6e-4` starts one process per chip (as TorchTPU runs on a TPU VM), joined by
a `tpu_dist` process group; `%%tpu spmd` runs the cell on all four. The transformer is loaded
with Diffusers' `TensorParallelConfig`, the rest of the pipeline around it:"""),
    ("code", """prompts = ["a large red circle in the top left on a black background",
           "a blue triangle left of a white circle on a gray background"]
%tpu cluster start v6e-4"""),
    ("code", """%%tpu spmd
import torch, torch.distributed as dist
import tpu_lab
from diffusers import FluxPipeline, FluxTransformer2DModel, TensorParallelConfig
from diffusers.utils import logging
from transformers.utils import logging as transformers_logging
from tpu_lab.models import shapes

logging.disable_progress_bar()
logging.set_verbosity_error()
transformers_logging.set_verbosity_error()
transformers_logging.disable_progress_bar()
transformer = FluxTransformer2DModel.from_pretrained(
    shapes.FOLDER, subfolder="transformer", dtype=torch.bfloat16,
    parallel_config=TensorParallelConfig(tp_degree=4))
pipe = FluxPipeline.from_pretrained(shapes.FOLDER, transformer=transformer,
                                    dtype=torch.bfloat16).to("tpu")
pipe.set_progress_bar_config(disable=True)
pipe.transformer.compile(backend="tpu", fullgraph=True, dynamic=False)

prompts = ["a large red circle in the top left on a black background",
           "a blue triangle left of a white circle on a gray background"]
images = pipe(prompts, num_inference_steps=shapes.STEPS, output_type="pt",
              generator=torch.Generator().manual_seed(0), **shapes.CALL).images
bigger = pipe(prompts, num_inference_steps=2, height=48, width=48,
              max_sequence_length=shapes.TOKENS)          # a new size: a recompile
if dist.get_rank() == 0:
    torch.save(images.float().cpu(), tpu_lab.scratch("tp4.pt"))
    print(tpu_lab.explain())"""),
    ("md", """Every rank printed nothing but rank 0, which printed why its second call recompiled. The
table under the cell is what each chip holds: a quarter of every weight that the plan splits
(attention projections, MLPs), a full copy of the rest (norms, embeddings, the text encoders).
The images, from rank 0:"""),
    ("code", """tp4 = torch.load("scratch/tp4.pt")
tpu_lab.preview(tp4, labels=["0", "1"])"""),
    ("md", """## 3 · The same on one chip, and how close

TP=1 in this process, same bfloat16 weights, same seed. The four chips sum their partial
products in another order, which changes the last bits of some bfloat16 activations (8
significant bits), and 20 denoising steps carry such differences on: most pixels agree closely,
a few can end up far apart. In float32 the same comparison agrees to 1e-4
(`tests/test_shapes_cluster.py` checks both, over 4 steps):"""),
    ("code", """one = shapes.shapes_pipeline(dtype=torch.bfloat16)
one.set_progress_bar_config(disable=True)
tp1 = one(prompts, num_inference_steps=shapes.STEPS, output_type="pt",
          generator=torch.Generator().manual_seed(0), **shapes.CALL).images.float().cpu()
diff = (tp4 - tp1).abs()
print(f"TP=4 vs TP=1 in bfloat16: mean difference {diff.mean().item():.4f}, "
      f"{(diff < 0.05).float().mean().item():.1%} of values within 0.05, "
      f"largest {diff.max().item():.2f}")"""),
    ("md", """## 4 · The denoising as a video

The trajectory of the first prompt, one frame per step (Flux's packed latents unpacked first):"""),
    ("code", """from tpu_lab.media import Trajectory

traj = Trajectory(one)

def capture(p, step, t, tensors):
    traj(p, step, t, {"latents": p._unpack_latents(tensors["latents"], 32, 32, p.vae_scale_factor)})
    return tensors

one(prompts[:1], num_inference_steps=shapes.STEPS, generator=torch.Generator().manual_seed(0),
    callback_on_step_end=capture, callback_on_step_end_tensor_inputs=["latents"], **shapes.CALL)
traj.video(fps=6)"""),
    ("md", """## 5 · Video: a model without a plan gets one

The announcement's video example (MiniMax-H3) and the embedded video model's family, Latte, have
no `_tp_plan` in Diffusers 0.42.1: asked to split one, the planner says so."""),
    ("code", """from tpu_lab.models import clips

latte = json.loads((clips.FOLDER / "transformer" / "config.json").read_text())
try:
    sh.plan(latte, chips=4, generation="v6e", dtype=torch.bfloat16)
except tpu_lab.ShardingError as err:
    print(err)"""),
    ("md", """As the announcement says, such a model gets one by defining `tp_plan`. Latte's blocks use
Diffusers' generic `Attention`, whose processor splits the heads by their count (4) rather than
by their size: a chip holding a quarter of the query columns would cut them into 4 heads of 8
instead of 1 head of 32. So the plan splits the feed-forward of every block, spatial and
temporal (columns, then rows: one all-reduce per block), and keeps attention whole.
`clips.LatteTransformerTP` is `LatteTransformer3DModel` with that plan as its `_tp_plan`:"""),
    ("code", """print(clips.TP_PLAN)
sh.plan(latte, chips=4, generation="v6e", dtype=torch.bfloat16, tp_plan=clips.TP_PLAN)"""),
    ("code", """%%tpu spmd
from diffusers import LattePipeline
from tpu_lab.models import clips

transformer = clips.LatteTransformerTP.from_pretrained(
    clips.FOLDER, subfolder="transformer", dtype=torch.bfloat16,
    parallel_config=TensorParallelConfig(tp_degree=4))
video = LattePipeline.from_pretrained(clips.FOLDER, transformer=transformer,
                                      dtype=torch.bfloat16).to("tpu")
video.set_progress_bar_config(disable=True)
video.transformer.compile(backend="tpu", fullgraph=True, dynamic=False)
frames = video(["a large red circle moving right on a black background"],
               num_inference_steps=clips.STEPS, guidance_scale=clips.GUIDANCE, output_type="pt",
               generator=torch.Generator().manual_seed(0), **clips.CALL).frames
if dist.get_rank() == 0:
    torch.save(frames.float().cpu(), tpu_lab.scratch("tp4_clip.pt"))"""),
    ("md", """Each chip holds the attention whole and a quarter of each feed-forward (the table under
the cell). The clip from rank 0, played:"""),
    ("code", """tpu_lab.preview(torch.load("scratch/tp4_clip.pt")[0], layout="TCHW", fps=8)"""),
    ("code", "%tpu cluster stop"),
    ("md", """## 6 · How fast on a real v6e-4? An estimate

The times above are host time on the simulated device. For a model of the announcement's size,
tpu_lab estimates the TPU time from the published config alone: Qwen-Image's transformer
(`tpu_lab.sharding.published_configs`, the numbers of its `config.json`), built on the meta device (no
weights, nothing downloaded) in bfloat16, split over the four v6e chips (TP=4) by Diffusers'
own plan, for one 1024×1024 image. Every op is costed on an **idealised** v6e (its published
peak FLOP/s and HBM bandwidth; the all-reduces over ICI): an **estimate of an idealised chip**,
never a measurement. One denoising step is one call of the transformer:"""),
    ("code", """from tpu_lab.sharding.published_configs import PUBLISHED, config

qwen = config("qwen-image")
print(PUBLISHED["qwen-image"].source)
print({k: qwen[k] for k in ("num_layers", "num_attention_heads", "attention_head_dim", "joint_attention_dim")})
qwen_tp4 = sh.plan(qwen, chips=4, generation="v6e", dtype=torch.bfloat16, image_size=(1024, 1024))
weights = sum(e.info.global_bytes for e in qwen_tp4.layout.entries if e.kind == "parameter")
print(f"{weights / 2**30:.1f} GiB of bfloat16 weights ({weights / 2 / 1e9:.1f} B parameters) over 4 chips")
step = qwen_tp4.estimate("forward")
step"""),
    ("md", """The view's images/s counts one call as one image; a whole image takes many. Qwen-Image's
pipeline runs 50 steps by default. With classifier-free guidance
(`true_cfg_scale` and a negative prompt) it calls the transformer twice a step, once for the
prompt and once for the negative prompt; run as one batch of 2 instead, the weights are read
once for both:"""),
    ("code", """cfg = sh.plan(qwen, chips=4, generation="v6e", dtype=torch.bfloat16, image_size=(1024, 1024),
              batch=2).estimate("forward")
steps = 50
for label, value in (
        ("one step, one call (batch 1)", f"{step.seconds * 1e3:.1f} ms, {step.bound}-bound"),
        ("one step with CFG, two calls", f"{2 * step.seconds * 1e3:.1f} ms"),
        ("one step with CFG, one batch of 2", f"{cfg.seconds * 1e3:.1f} ms, {cfg.bound}-bound"),
        (f"one image, {steps} steps, no CFG", f"{steps * step.seconds:.2f} s"),
        (f"one image, {steps} steps with CFG", f"{steps * 2 * step.seconds:.2f} s as two calls, "
                                               f"{steps * cfg.seconds:.2f} s batched")):
    print(f"{label:34} {value}")
print()
for label, e in (("batch 1", step), ("batch 2", cfg)):
    work = [o for o in e.ops if o.kind not in ("collective", "launch")]
    compute = sum(o.busy_seconds for o in work if o.bound == "compute")
    memory = sum(o.busy_seconds for o in work if o.bound != "compute")
    hidden = "overlapped by the ops" if e.collective_seconds <= compute + memory else "longer than the ops"
    print(f"{label}: {e.seconds * 1e3:.1f} ms = {compute * 1e3:.1f} ms in compute-bound ops (MXU) + "
          f"{memory * 1e3:.1f} ms in memory-bound ops (HBM) + {e.launch_seconds * 1e6:.0f} µs launch;")
    print(f"         all-reduces {e.collective_seconds * 1e3:.1f} ms, {hidden} "
          f"({e.ici_bytes / 2**30:.2f} GiB sent per chip over ICI)")"""),
    ("md", """One image at a time is partly memory-bound: the adaptive-norm layers multiply a single
timestep embedding by large weights, reading all of them for one row, and every step reads
every weight. A batch of 2 shares those reads, which is why batched guidance costs less than two
calls. The all-reduces (four per block: after the attention and after the MLP, of the image
stream and of the text stream) take a good part of a step; the idealised chip hides them
behind the ops, a real compiler hides less.

Left out: the text encoder (Qwen2.5-VL, once per prompt), the VAE decode (once per image),
compile time (the first call), host overhead, and anything XLA does differently from the
engine's fusion rules. The prompt counts as the pipeline's longest (512 tokens). How far is an
idealised chip from a real one? MaxDiffusion published a measured time for FLUX.1-dev on a
v6e-4 (four images, one per chip, 28 steps); the same engine, the same assumptions:"""),
    ("code", """from tpu_lab.sharding.published_runs import MEASUREMENTS, compare

row = next(r for r in MEASUREMENTS if r.model == "flux.1-dev" and r.generation == "v6e")
check = compare(row)
print(f"{row.label}: measured {row.seconds} s ({row.source}); estimated {check.seconds:.2f} s, "
      f"{check.ratio:.2f} of the measured time")"""),
    ("md", """A real run is slower than its estimate of an idealised chip, as here: read the Qwen-Image
seconds above as a lower bound, and use them to compare choices (batched guidance or two calls,
TP=4 or one chip) rather than as a promise. Notebook 09 explains where the time goes.

On a real v6e-4 replace `shapes.FOLDER` by the model's name on the Hub (and drop
`%tpu use`: the hardware decides the topology). Timings measured here are host time on the
simulated device, never TPU speed; section 6's are estimates."""),
]


def build(cells) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}  # fmt: skip
    nb.cells = [nbformat.v4.new_markdown_cell(src) if kind == "md"
                else nbformat.v4.new_code_cell(src) for kind, src in cells]  # fmt: skip
    return nb


NAMES = {"04": ("04_images_and_video.ipynb", NB04),
         "07": ("07_the_announcement_recipe.ipynb", NB07)}


def main(argv: list[str] | None = None) -> int:
    chosen = (sys.argv[1:] if argv is None else argv) or list(NAMES)
    unknown = [n for n in chosen if n not in NAMES]
    if unknown:
        raise SystemExit(f"No notebook {unknown}; this script writes {', '.join(NAMES)}.")
    for name in chosen:
        filename, cells = NAMES[name]
        nbformat.write(build(cells), NOTEBOOKS / filename)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
