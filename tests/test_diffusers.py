"""diffusers pipelines on the "tpu" device: eager runs match the CPU bit for bit.

Tiny pipelines are built from configs (no hub access), saved with ``save_pretrained`` and
loaded back with ``Pipeline.from_pretrained``: a DDPMPipeline (UNet2DModel with attention
blocks) and a DiTPipeline (DiTTransformer2DModel, a tiny AutoencoderKL, DDPMScheduler).

Compiled runs (``backend="tpu"``) are compared with the CPU's eager output: with the ``aten``
lowering (``compile_backend.lowering``) the graph runs the CPU's own ATen kernels (bitwise
equal); with the default Inductor lowering, Inductor's fused, vectorised CPU code rounds
differently (reassociated reductions, vectorised transcendental functions), so the results are
close, to a tolerance stated at each test.
"""

from __future__ import annotations

import pytest
import torch

import tpu_lab  # noqa: F401  (installs the "tpu" device)
from tpu_lab.device import compile_backend

diffusers = pytest.importorskip("diffusers")

from diffusers import (  # noqa: E402
    AutoencoderKL,
    DDPMPipeline,
    DDPMScheduler,
    DiTPipeline,
    DiTTransformer2DModel,
    UNet2DModel,
)

STEPS = 4
BATCH = 2
SIZE = 16

#: Largest differences measured between the compiled-with-Inductor and the eager CPU runs
#: (x86-64, 2 cores, torch 2.13): UNet forward 9.8e-7 (outputs of magnitude ~1), DDPM pipeline
#: 4.6e-6, DiT pipeline 5.8e-6 (images in [0, 1]). A single forward's differences are a few
#: float32 ulps. In both pipelines the DDPM scheduler's x0 prediction divides the model's error
#: by sqrt(alphā_t), down to ~0.0064 at t=999 (a factor of ~160, before clipping), and DiT's
#: classifier-free guidance (scale 4) multiplies the noise prediction's error by up to ~9.
#: The tolerances leave >= 10x headroom over the measurements for other CPUs' vector widths.
UNET_FORWARD_ATOL = 1e-5
DDPM_PIPELINE_ATOL = 1e-4
DIT_PIPELINE_ATOL = 1e-4


def _unet(attention: bool) -> UNet2DModel:
    down = ("DownBlock2D", "AttnDownBlock2D" if attention else "DownBlock2D")
    up = ("AttnUpBlock2D" if attention else "UpBlock2D", "UpBlock2D")
    return UNet2DModel(
        sample_size=SIZE,
        in_channels=3,
        out_channels=3,
        layers_per_block=1,
        block_out_channels=(8, 16),
        down_block_types=down,
        up_block_types=up,
        norm_num_groups=4,
        attention_head_dim=8,
    )


@pytest.fixture(scope="module")
def ddpm_dir(tmp_path_factory):
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("tiny-ddpm")
    pipe = DDPMPipeline(unet=_unet(attention=True), scheduler=DDPMScheduler())
    pipe.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def dit_dir(tmp_path_factory):
    torch.manual_seed(1)
    transformer = DiTTransformer2DModel(
        num_attention_heads=2,
        attention_head_dim=8,
        in_channels=4,
        out_channels=8,  # learned sigma, as DiT-XL-2
        num_layers=2,
        sample_size=SIZE // 2,
        patch_size=2,
        num_embeds_ada_norm=1000,  # DiTPipeline uses class 1000 as the null class
    )
    vae = AutoencoderKL(
        in_channels=3,
        out_channels=3,
        down_block_types=("DownEncoderBlock2D", "DownEncoderBlock2D"),
        up_block_types=("UpDecoderBlock2D", "UpDecoderBlock2D"),
        block_out_channels=(8, 16),
        layers_per_block=1,
        latent_channels=4,
        norm_num_groups=4,
        sample_size=SIZE,
    )
    path = tmp_path_factory.mktemp("tiny-dit")
    DiTPipeline(transformer=transformer, vae=vae, scheduler=DDPMScheduler()).save_pretrained(path)
    return path


def _pipes(cls, path):
    cpu = cls.from_pretrained(path)
    tpu = cls.from_pretrained(path).to("tpu")
    cpu.set_progress_bar_config(disable=True)
    tpu.set_progress_bar_config(disable=True)
    return cpu, tpu


def _ddpm(pipe, generator="cpu", output_type="pt"):
    if generator == "cpu":
        generator = torch.Generator("cpu").manual_seed(0)
    torch.manual_seed(0)  # the global generators (CPU and "tpu"): used when generator is None
    return pipe(
        batch_size=BATCH, num_inference_steps=STEPS, generator=generator, output_type=output_type
    ).images


def _dit(pipe, generator="cpu"):
    if generator == "cpu":
        generator = torch.Generator("cpu").manual_seed(0)
    # DiTPipeline passes its generator to the initial latents only: the DDPM steps' noise
    # comes from the global generator of the pipeline's device.
    torch.manual_seed(0)
    return pipe(
        class_labels=[1, 7],
        guidance_scale=4.0,
        num_inference_steps=STEPS,
        generator=generator,
        output_type="pt",
    ).images


def _assert_on_tpu(module):
    devices = {p.device for p in module.parameters()} | {b.device for b in module.buffers()}
    assert devices == {torch.device("tpu", 0)}


def _compiled_graphs() -> int:
    return torch._dynamo.utils.counters["stats"]["unique_graphs"]


# ---------------------------------------------------------------------------------------
# Eager


@pytest.mark.parametrize("generator", ["cpu", None], ids=["cpu_generator", "global_seed"])
def test_ddpm_pipeline_bitwise_equal_to_cpu(ddpm_dir, generator):
    cpu, tpu = _pipes(DDPMPipeline, ddpm_dir)
    assert tpu.device == torch.device("tpu", 0)
    _assert_on_tpu(tpu.unet)
    expected = _ddpm(cpu, generator)
    actual = _ddpm(tpu, generator)
    assert actual.device.type == "tpu"
    assert expected.shape == (BATCH, 3, SIZE, SIZE)
    assert torch.equal(expected, actual.cpu())


def test_ddpm_pipeline_numpy_output_equal_to_cpu(ddpm_dir):
    cpu, tpu = _pipes(DDPMPipeline, ddpm_dir)
    expected = _ddpm(cpu, output_type="np")
    actual = _ddpm(tpu, output_type="np")
    assert (expected == actual).all()


@pytest.mark.parametrize("generator", ["cpu", None], ids=["cpu_generator", "global_seed"])
def test_dit_pipeline_bitwise_equal_to_cpu(dit_dir, generator):
    cpu, tpu = _pipes(DiTPipeline, dit_dir)
    _assert_on_tpu(tpu.transformer)
    _assert_on_tpu(tpu.vae)
    expected = _dit(cpu, generator)
    actual = _dit(tpu, generator)
    assert actual.device.type == "tpu"
    assert expected.shape == (BATCH, 3, SIZE, SIZE)
    assert torch.equal(expected, actual.cpu())


def test_ddpm_pipeline_with_tpu_generator(ddpm_dir):
    cpu, tpu = _pipes(DDPMPipeline, ddpm_dir)
    expected = _ddpm(cpu)
    actual = _ddpm(tpu, generator=torch.Generator("tpu").manual_seed(0))
    # The device's generators are CPU generators: the same seed, the same numbers.
    assert torch.equal(expected, actual.cpu())


# ---------------------------------------------------------------------------------------
# Compiled: the UNet forward alone, both lowerings


def _unet_inputs():
    g = torch.Generator().manual_seed(3)
    return torch.randn(BATCH, 3, SIZE, SIZE, generator=g), torch.tensor(999)


def _compiled_unet_forward(unet_cpu, lowering, use_lowering):
    use_lowering(lowering)
    unet = UNet2DModel.from_config(unet_cpu.config)
    unet.load_state_dict(unet_cpu.state_dict())
    unet = unet.eval().to("tpu")
    unet.compile(backend="tpu", fullgraph=True, dynamic=False)
    sample, t = _unet_inputs()
    with torch.no_grad():
        expected = unet_cpu(sample, t).sample
        actual = unet(sample.to("tpu"), t).sample
    assert _compiled_graphs() == 1
    assert actual.device.type == "tpu"
    return expected, actual.cpu()


def test_unet_forward_compiled_aten_lowering_bitwise(fresh_dynamo, use_lowering):
    """A UNet without attention blocks: the aten lowering gives the CPU's bits."""
    torch.manual_seed(0)
    expected, actual = _compiled_unet_forward(_unet(attention=False).eval(), "aten", use_lowering)
    assert torch.equal(expected, actual)


def test_unet_with_attention_forward_compiled_aten_lowering_bitwise(
    ddpm_dir, fresh_dynamo, use_lowering
):
    unet_cpu = UNet2DModel.from_pretrained(ddpm_dir / "unet").eval()
    expected, actual = _compiled_unet_forward(unet_cpu, "aten", use_lowering)
    assert torch.equal(expected, actual)


@pytest.fixture(scope="module")
def ddpm_compiled_inductor(ddpm_dir):
    """The DDPM pipelines (CPU eager, "tpu" with its UNet compiled through Inductor); the
    UNet is compiled here, once, for the pipeline's input shapes."""
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    cpu, tpu = _pipes(DDPMPipeline, ddpm_dir)
    with compile_backend.lowering("inductor"):
        tpu.unet.compile(backend="tpu", fullgraph=True, dynamic=False)
        sample, t = _unet_inputs()
        with torch.no_grad():  # as in the pipeline: compiles the inference graph
            tpu.unet(sample.to("tpu"), t)
    assert _compiled_graphs() == 1
    yield cpu, tpu
    torch._dynamo.reset()


def test_unet_forward_compiled_inductor_lowering_close(ddpm_compiled_inductor):
    cpu, tpu = ddpm_compiled_inductor
    sample, t = _unet_inputs()
    with torch.no_grad():
        expected = cpu.unet(sample, t).sample
        actual = tpu.unet(sample.to("tpu"), t).sample
    assert actual.device.type == "tpu"
    assert _compiled_graphs() == 1  # no recompilation
    torch.testing.assert_close(actual.cpu(), expected, rtol=0, atol=UNET_FORWARD_ATOL)


# ---------------------------------------------------------------------------------------
# Compiled: whole pipelines


def test_ddpm_pipeline_compiled_unet_inductor_close(ddpm_compiled_inductor):
    cpu, tpu = ddpm_compiled_inductor
    expected = _ddpm(cpu)
    actual = _ddpm(tpu)
    assert _compiled_graphs() == 1  # every step ran the one compiled graph
    torch.testing.assert_close(actual.cpu(), expected, rtol=0, atol=DDPM_PIPELINE_ATOL)


@pytest.mark.parametrize("lowering", ["aten", "inductor"])
def test_dit_pipeline_compiled_transformer(dit_dir, lowering, fresh_dynamo, use_lowering):
    use_lowering(lowering)
    cpu, tpu = _pipes(DiTPipeline, dit_dir)
    tpu.transformer.compile(backend="tpu", fullgraph=True, dynamic=False)
    expected = _dit(cpu)
    actual = _dit(tpu)
    assert _compiled_graphs() == 1
    if lowering == "aten":
        assert torch.equal(expected, actual.cpu())
    else:
        torch.testing.assert_close(actual.cpu(), expected, rtol=0, atol=DIT_PIPELINE_ATOL)
