"""The announcement's recipe on the 4-chip SPMD cluster: the embedded FluxPipeline with its
transformer loaded by ``from_pretrained(..., parallel_config=TensorParallelConfig(tp_degree=4))``
(Diffusers' own ``_tp_plan`` for Flux), unchanged, gives the images of TP=1, in float32 within
float32 tolerance and in bfloat16 within bfloat16's; each chip holds a quarter of every sharded
weight. The same for the embedded LattePipeline, whose transformer family has no plan in
Diffusers: ``clips.LatteTransformerTP`` defines one (its feed-forwards split four ways).

One cluster for the module (one process per simulated v6e chip, about 10 s to start).
"""

from __future__ import annotations

import functools
import random

import pytest
import torch

import tpu_lab  # noqa: F401  (the "tpu" device)

pytest.importorskip("diffusers", reason="diffusers is missing: pip install 'tpu-lab[hf]'")

from tpu_lab.launch import cluster as spmd  # noqa: E402
from tpu_lab.models import shapes, shapes_world  # noqa: E402

STEPS = 4
#: float32: the row-wise layers sum 4 partial products in another order, and 4 Euler steps
#: carry the difference on (measured with the shipped weights: at most 2.7e-6 on images in
#: [0, 1], the mean 1.1e-7; 1.5e-5 on the video model's frames, the mean 2.3e-8; the
#: pixel-space image model before them gave 1.35e-4). The bound is twice the largest.
ATOL = 3e-5
#: bfloat16: 8 significant bits (one step at 1.0 is 7.8e-3); the two orders of summation differ
#: in the last place of some activations and 4 steps amplify a few of them, as much as
#: bfloat16 itself differs from float32 at TP=1, so TP=4 must differ from TP=1 no more than
#: twice that (measured on images: the largest 0.049, mean 1.4e-3, 0.9% of values over 0.025,
#: against bfloat16's own 0.050, 2.0e-3 and 1.2%; on the video frames 0.32, 5.6e-4 and 0.6%
#: against 0.38, 8.9e-4 and 0.9%).
ATOL_BF16 = 0.25

RECIPE = """
import torch, torch.distributed as dist
from diffusers import FluxPipeline, FluxTransformer2DModel, TensorParallelConfig
from tpu_lab.models import shapes
dtype = {dtype}
transformer = FluxTransformer2DModel.from_pretrained(
    shapes.FOLDER, subfolder="transformer", dtype=dtype,
    parallel_config=TensorParallelConfig(tp_degree=4))
pipe = FluxPipeline.from_pretrained(shapes.FOLDER, transformer=transformer, dtype=dtype)
pipe = pipe.to("tpu")
pipe.set_progress_bar_config(disable=True)
images = pipe({prompts!r}, num_inference_steps={steps},
              generator=torch.Generator().manual_seed(0), output_type="pt", **shapes.CALL).images
if dist.get_rank() == 0:
    torch.save(images.float().cpu(), {out!r})
"""


def _prompts() -> list[str]:
    rng = random.Random(5)
    return [shapes_world.caption(shapes_world.sample_scene(rng)) for _ in range(2)]


@pytest.fixture(scope="module")
def cluster():
    c = spmd.start("v6e-4")
    try:
        yield c
    finally:
        spmd.stop()


@functools.cache  # the float32 images serve both dtypes' tests
def _tp1(dtype) -> torch.Tensor:
    pipe = shapes.shapes_pipeline(dtype=dtype)
    pipe.set_progress_bar_config(disable=True)
    return pipe(_prompts(), num_inference_steps=STEPS, generator=torch.Generator().manual_seed(0),
                output_type="pt", **shapes.CALL).images.float().cpu()  # fmt: skip


def _assert_tp_close(got, expected, dtype: str, atol: float, tp1_float32) -> None:
    """TP=4's output ``got`` against TP=1's ``expected``: in float32 within ``atol``, a few
    amplified last-place values aside; in bfloat16 no further from TP=1 than twice what
    bfloat16 itself is from float32 at TP=1 (``tp1_float32()`` computes that output)."""
    diff = (got - expected).abs()
    print(f"{dtype}: |TP=4 - TP=1| max {diff.max().item():.2e}, mean {diff.mean().item():.2e}, "
          f"over {atol / 10:g}: {(diff > atol / 10).float().mean().item():.2%}")  # fmt: skip
    if dtype == "torch.float32":
        assert diff.max() <= atol
        assert (diff > atol / 10).float().mean() <= 0.005  # a few amplified last-place values
        assert diff.mean() < atol / 20
        return
    rounding = (tp1_float32() - expected).abs()  # bfloat16's own error at TP=1
    print(f"bfloat16 against float32 at TP=1: max {rounding.max().item():.2e}, mean "
          f"{rounding.mean().item():.2e}, over {atol / 10:g}: "
          f"{(rounding > atol / 10).float().mean().item():.2%}")  # fmt: skip
    assert diff.mean() <= 2 * rounding.mean()
    assert (diff > atol / 10).float().mean() <= 2 * (rounding > atol / 10).float().mean()


@pytest.mark.parametrize(("dtype", "atol"), [("torch.float32", ATOL),
                                             ("torch.bfloat16", ATOL_BF16)])  # fmt: skip
def test_tp4_pipeline_matches_tp1(cluster, tmp_path, dtype, atol):
    out = tmp_path / "tp4.pt"
    result = cluster.run_cell(
        RECIPE.format(dtype=dtype, prompts=_prompts(), steps=STEPS, out=str(out))
    )
    _assert_tp_close(torch.load(out), _tp1(eval(dtype)), dtype, atol, lambda: _tp1(torch.float32))
    (transformer,) = [v for v in result.sharding if v.name == "transformer"]
    assert len(set(transformer.local_bytes)) == 1  # every chip holds the same share
    whole = sum(p.numel() * p.element_size() for p in _transformer(eval(dtype)).parameters())
    assert whole / 4 < transformer.local_bytes[0] < whole


VIDEO_RECIPE = """
import torch, torch.distributed as dist
from diffusers import LattePipeline, TensorParallelConfig
from tpu_lab.models import clips
transformer = clips.LatteTransformerTP.from_pretrained(
    clips.FOLDER, subfolder="transformer", dtype={dtype},
    parallel_config=TensorParallelConfig(tp_degree=4))
pipe = LattePipeline.from_pretrained(clips.FOLDER, transformer=transformer, dtype={dtype})
pipe = pipe.to("tpu")
pipe.set_progress_bar_config(disable=True)
frames = pipe({prompts!r}, num_inference_steps={steps}, guidance_scale=1.0,
              generator=torch.Generator().manual_seed(0), output_type="pt", **clips.CALL).frames
if dist.get_rank() == 0:
    torch.save(frames.float().cpu(), {out!r})
"""


@pytest.mark.parametrize(("dtype", "atol"), [("torch.float32", ATOL),
                                             ("torch.bfloat16", ATOL_BF16)])  # fmt: skip
def test_tp4_video_pipeline_with_its_own_plan_matches_tp1(cluster, tmp_path, dtype, atol):
    from tpu_lab.models import clips

    prompts = ["a small red circle moving right on a black background"]
    out = tmp_path / "tp4.pt"
    result = cluster.run_cell(
        VIDEO_RECIPE.format(dtype=dtype, prompts=prompts, steps=STEPS, out=str(out))
    )
    def tp1(pipe) -> torch.Tensor:
        pipe.set_progress_bar_config(disable=True)
        return pipe(prompts, num_inference_steps=STEPS, guidance_scale=1.0,
                    generator=torch.Generator().manual_seed(0), output_type="pt",
                    **clips.CALL).frames.float().cpu()  # fmt: skip

    pipe = clips.clips_pipeline(dtype=eval(dtype))
    _assert_tp_close(torch.load(out), tp1(pipe), dtype, atol,
                     lambda: tp1(clips.clips_pipeline(dtype=torch.float32)))  # fmt: skip
    (transformer,) = [v for v in result.sharding if v.name == "transformer"]
    assert len(set(transformer.local_bytes)) == 1
    tensors = [*pipe.transformer.parameters(), *pipe.transformer.buffers()]
    whole = sum(t.numel() * t.element_size() for t in tensors)
    ffn = sum(p.numel() * p.element_size() for n, p in pipe.transformer.named_parameters()
              if ".ff.net.0." in n or n.endswith(".ff.net.2.weight"))  # fmt: skip
    # each chip: the attention and the rest whole, a quarter of each feed-forward
    assert whole - ffn < transformer.local_bytes[0] <= whole - ffn + ffn // 4


def _transformer(dtype):
    from diffusers import FluxTransformer2DModel

    return FluxTransformer2DModel.from_pretrained(shapes.FOLDER, subfolder="transformer",
                                                  dtype=dtype)  # fmt: skip
