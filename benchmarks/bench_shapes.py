"""One image from the embedded text-to-image model (the tiny FluxPipeline, 32x32, 20 steps) and
one clip from the text-to-video model (the tiny LattePipeline, 16 frames of 32x32, 20 steps): eager
on the bundled "tpu" device against plain CPU PyTorch, the transformer compiled the announcement's
way (``pipe.transformer.compile(backend="tpu", fullgraph=True, dynamic=False)``) against eager,
and one denoising step of the transformer tensor-parallel over the 4-chip SPMD cluster
(``TensorParallelConfig(tp_degree=4)``, float32; Latte with ``clips.LatteTransformerTP``'s plan)
against TP=1 in this process.

The compiled side is warmed up first (its compilation is timed apart); then the sides run
interleaved, median of several repeats. Run: ``python benchmarks/bench_shapes.py`` (``--quick``:
fewer repeats; ``--no-cluster``: skip the TP=4 figures; ``--model image|video``: one model).
Host timings of a simulation, never TPU speed.
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch

import tpu_lab  # noqa: F401  (installs the "tpu" device)
from _record import record
from tpu_lab.models import clips, shapes

PROMPTS = {"image": "a large red circle in the top left on a black background",
           "video": "a large red circle moving right on a black background"}  # fmt: skip


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _run(pipe) -> None:
    generator = torch.Generator().manual_seed(0)
    if "Latte" in type(pipe).__name__:
        out = pipe(PROMPTS["video"], num_inference_steps=clips.STEPS, output_type="pt",
                   guidance_scale=clips.GUIDANCE, generator=generator, **clips.CALL).frames
    else:
        out = pipe(PROMPTS["image"], num_inference_steps=shapes.STEPS, output_type="pt",
                   generator=generator, **shapes.CALL).images  # fmt: skip
    out.cpu()  # wait for the device


#: Each model's module (its ``FOLDER`` holds the weights).
MODULES = {"image": shapes, "video": clips}


def transformer_class(name: str):
    """The class that loads each model's transformer for the TP=4 step (Latte with its plan)."""
    if name == "image":
        from diffusers import FluxTransformer2DModel

        return FluxTransformer2DModel
    return clips.LatteTransformerTP


def step_inputs(name: str, g: torch.Generator) -> dict[str, torch.Tensor]:
    """One denoising step's inputs for each model's transformer (one 32x32 image or clip),
    shaped by the models' VAEs and configs."""
    if name == "image":
        # the VAE halves the side at each level but the last; Flux packs 2x2 latents a token
        side = shapes.CALL["height"] // 2 ** len(shapes.VAE_CONFIG["block_out_channels"])
        tokens, channels = side * side, shapes.TRANSFORMER_CONFIG["in_channels"]
        return dict(hidden_states=torch.randn(1, tokens, channels, generator=g),
                    encoder_hidden_states=torch.randn(1, shapes.TOKENS, 64, generator=g),
                    pooled_projections=torch.randn(1, 64, generator=g),
                    timestep=torch.tensor([0.5]), img_ids=torch.zeros(tokens, 3),
                    txt_ids=torch.zeros(shapes.TOKENS, 3))  # fmt: skip
    side = clips.TRANSFORMER_CONFIG["sample_size"]
    return dict(hidden_states=torch.randn(1, clips.Z, clips.FRAMES, side, side, generator=g),
                encoder_hidden_states=torch.randn(1, shapes.TOKENS, 64, generator=g),
                timestep=torch.tensor([500.0]))  # fmt: skip


def _load_step(name: str, **kwargs):
    """The transformer on "tpu" and its step's inputs (kwargs go to ``from_pretrained``)."""
    model = transformer_class(name).from_pretrained(MODULES[name].FOLDER, subfolder="transformer",
                                                    **kwargs).to("tpu")  # fmt: skip
    inputs = step_inputs(name, torch.Generator().manual_seed(0))
    return model, {k: v.to("tpu") for k, v in inputs.items()}


#: The TP=4 side, run on every rank: this file's own loaders, imported from its folder.
STEP = """
import sys, time, torch, torch.distributed as dist
sys.path.insert(0, {here!r})
from diffusers import TensorParallelConfig
from bench_shapes import _load_step
model, inputs = _load_step({name!r}, parallel_config=TensorParallelConfig(tp_degree=4))
times = []
with torch.no_grad():
    for _ in range({repeats} + 1):
        dist.barrier()
        start = time.perf_counter()
        out = model(**inputs, return_dict=False)[0].cpu()
        dist.barrier()
        times.append(time.perf_counter() - start)
if dist.get_rank() == 0:
    torch.save(times[1:], {out!r})
"""


def _tp_step(name: str, repeats: int) -> tuple[float, float]:
    """Median seconds of one transformer step (one image or clip): TP=4 on the cluster, TP=1
    here."""
    from tpu_lab.launch import cluster as spmd

    with tempfile.TemporaryDirectory() as folder:
        out = str(Path(folder) / "times.pt")
        c = spmd.start("v6e-4")
        try:
            c.run_cell(STEP.format(here=str(Path(__file__).resolve().parent), name=name,
                                   repeats=repeats, out=out))  # fmt: skip
            tp4 = statistics.median(torch.load(out))
        finally:
            spmd.stop()
    model, inputs = _load_step(name)
    times = []
    with torch.no_grad():
        for _ in range(repeats + 1):
            times.append(_timed(lambda: model(**inputs, return_dict=False)[0].cpu()))
    return tp4, statistics.median(times[1:])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--quick", action="store_true", help="3 repeats instead of 7")
    p.add_argument("--no-cluster", action="store_true", help="skip the TP=4 cluster figures")
    p.add_argument("--model", choices=("image", "video", "both"), default="both")
    args = p.parse_args(argv)
    repeats = 3 if args.quick else 7
    for name in ("image", "video") if args.model == "both" else (args.model,):
        _bench(name, repeats, not args.no_cluster)
    return 0


def _bench(name: str, repeats: int, cluster: bool) -> None:
    load = shapes.shapes_pipeline if name == "image" else clips.clips_pipeline
    cpu = load(device="cpu")
    eager = load()
    transformer = copy.copy(eager.transformer)
    transformer.compile(backend="tpu", fullgraph=True, dynamic=False)
    compiled = type(eager)(**{**eager.components, "transformer": transformer})
    for pipe in (cpu, eager, compiled):
        pipe.set_progress_bar_config(disable=True)
    lowering = os.environ.get("TPU_LAB_COMPILE_LOWERING", "inductor")
    first = _timed(lambda: _run(compiled))
    _run(eager), _run(cpu)
    times = {"cpu": [], "eager": [], "compiled": []}
    for _ in range(repeats):
        times["cpu"].append(_timed(lambda: _run(cpu)))
        times["eager"].append(_timed(lambda: _run(eager)))
        times["compiled"].append(_timed(lambda: _run(compiled)))
    median = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    what = (f"one 32x32 image, {shapes.STEPS} steps (tiny Flux)" if name == "image"
            else f"one clip of {clips.FRAMES} 32x32 frames, {clips.STEPS} steps (tiny Latte)")
    record("shapes", f"{what}, eager on tpu", median["eager"], "ms", baseline=median["cpu"])
    record("shapes", f"{what}, transformer compiled (backend tpu)", median["compiled"], "ms",
           baseline=median["eager"], baseline_label="eager on tpu",
           note=f"lowering {lowering}")  # fmt: skip
    record("shapes", f"{name}: first compiled call (compiles the transformer)", first, "s")
    if cluster:
        tp4, tp1 = _tp_step(name, repeats)
        record("shapes", f"{name}: one transformer step, TP=4 on the v6e-4 cluster", tp4 * 1e3,
               "ms", baseline=tp1 * 1e3, baseline_label="TP=1 on tpu",
               note="4 processes over gloo: collectives dominate a model this small")  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(main())
