"""tpu_lab.media.Trajectory and progress on tiny diffusers pipelines on the "tpu" device.

Pipelines are built from configs: DDPMPipeline (pixel space, no step callback: captured through
its scheduler), DiTPipeline (a VAE, no step callback) and a latent pipeline with the standard
``callback_on_step_end`` protocol and a VAE, defined here as diffusers' own pipelines do it. The
last captured step decoded must equal the pipeline's own output; a compiled UNet must run with
one compilation and no recompilation while the trajectory is captured.
"""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch

import tpu_lab  # noqa: F401  (installs the "tpu" device)
from tpu_lab.errors import MediaError
from tpu_lab.events import log
from tpu_lab.media import Trajectory, progress
from tpu_lab.views import view

diffusers = pytest.importorskip("diffusers")

from diffusers import (  # noqa: E402
    AutoencoderKL,
    DDPMPipeline,
    DDPMScheduler,
    DiffusionPipeline,
    DiTPipeline,
    DiTTransformer2DModel,
    UNet2DModel,
)
from diffusers.pipelines.pipeline_utils import ImagePipelineOutput  # noqa: E402
from diffusers.utils.torch_utils import randn_tensor  # noqa: E402

STEPS = 4
SIZE = 16


def _unet(channels: int, size: int) -> UNet2DModel:
    return UNet2DModel(
        sample_size=size,
        in_channels=channels,
        out_channels=channels,
        layers_per_block=1,
        block_out_channels=(8, 16),
        down_block_types=("DownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "UpBlock2D"),
        norm_num_groups=4,
    )


def _vae() -> AutoencoderKL:
    return AutoencoderKL(
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


class TinyLatentPipeline(DiffusionPipeline):
    """Unconditional latent diffusion with the step-callback protocol of diffusers' pipelines."""

    _callback_tensor_inputs = ["latents"]

    def __init__(self, unet, vae, scheduler):
        super().__init__()
        self.register_modules(unet=unet, vae=vae, scheduler=scheduler)

    @torch.no_grad()
    def __call__(
        self,
        batch_size=1,
        num_inference_steps=STEPS,
        generator=None,
        callback_on_step_end=None,
        callback_on_step_end_tensor_inputs=("latents",),
    ):
        shape = (batch_size, 4, self.unet.config.sample_size, self.unet.config.sample_size)
        latents = randn_tensor(shape, generator=generator, device=self._execution_device)
        self.scheduler.set_timesteps(num_inference_steps)
        self._num_timesteps = len(self.scheduler.timesteps)
        for i, t in enumerate(self.progress_bar(self.scheduler.timesteps)):
            noise = self.unet(latents, t).sample
            latents = self.scheduler.step(noise, t, latents, generator=generator).prev_sample
            if callback_on_step_end is not None:
                inputs = {"latents": latents}
                outputs = callback_on_step_end(
                    self, i, t, {k: inputs[k] for k in callback_on_step_end_tensor_inputs}
                )
                latents = outputs.pop("latents", latents)
        image = self.vae.decode(latents / self.vae.config.scaling_factor, return_dict=False)[0]
        return ImagePipelineOutput(images=(image / 2 + 0.5).clamp(0, 1))


def _quiet(pipe):
    pipe.set_progress_bar_config(disable=True)
    return pipe


@pytest.fixture(scope="module")
def ddpm():
    torch.manual_seed(0)
    return _quiet(DDPMPipeline(unet=_unet(3, SIZE), scheduler=DDPMScheduler()).to("tpu"))


@pytest.fixture(scope="module")
def latent():
    torch.manual_seed(1)
    pipe = TinyLatentPipeline(unet=_unet(4, SIZE // 2), vae=_vae(), scheduler=DDPMScheduler())
    return _quiet(pipe.to("tpu"))


def _seed():
    torch.manual_seed(0)
    return torch.Generator("cpu").manual_seed(0)


def _run_ddpm(pipe, **kwargs):
    return pipe(batch_size=2, num_inference_steps=STEPS, generator=_seed(), output_type="pt",
                **kwargs).images


# ---------------------------------------------------------------------------------------
# Capture and decode


def test_ddpm_scheduler_capture_last_frame_is_the_output(ddpm):
    traj = Trajectory(ddpm)
    expected = _run_ddpm(ddpm).cpu()
    with traj:
        images = _run_ddpm(ddpm).cpu()
    assert torch.equal(images, expected)  # capturing changed nothing
    assert "step" not in ddpm.scheduler.__dict__  # the hook is gone
    assert traj.steps == [0, 1, 2, 3] and len(traj) == STEPS
    decoded = traj.decoded()
    assert decoded.shape == (STEPS, 2, 3, SIZE, SIZE) and decoded.device.type == "cpu"
    assert torch.equal(decoded[-1], expected)  # DDPM: the last sample is the image
    assert not torch.equal(decoded[0], decoded[-1])


def test_run_picks_the_scheduler_hook_for_ddpm(ddpm):
    traj = Trajectory(ddpm, every=3)
    out = traj.run(batch_size=1, num_inference_steps=STEPS, generator=_seed(), output_type="pt")
    assert traj.steps == [0, 3]  # every 3rd, and the last
    assert torch.equal(traj.decoded()[-1], out.images.cpu())


def test_callback_pipeline_with_vae(latent):
    traj = Trajectory(latent)
    out = latent(batch_size=2, generator=_seed(), callback_on_step_end=traj,
                 callback_on_step_end_tensor_inputs=["latents"])
    assert traj.steps == [0, 1, 2, 3]
    decoded = traj.decoded()
    assert decoded.shape == (STEPS, 2, 3, SIZE, SIZE)  # through the VAE: 8x8 latents -> 16x16
    assert torch.equal(decoded[-1], out.images.cpu())
    # run() passes the callback itself, and every= keeps the last step
    traj2 = Trajectory(latent, every=2)
    out2 = traj2.run(batch_size=2, generator=_seed(), num_inference_steps=5)
    assert traj2.steps == [0, 2, 4]
    assert torch.equal(traj2.decoded()[-1], out2.images.cpu())


def test_dit_with_vae_through_the_scheduler():
    torch.manual_seed(2)
    transformer = DiTTransformer2DModel(
        num_attention_heads=2, attention_head_dim=8, in_channels=4, out_channels=8,
        num_layers=1, sample_size=SIZE // 2, patch_size=2, num_embeds_ada_norm=1000,
    )
    pipe = _quiet(DiTPipeline(transformer=transformer, vae=_vae(),
                              scheduler=DDPMScheduler()).to("tpu"))
    traj = Trajectory(pipe)
    out = traj.run(class_labels=[1, 7], guidance_scale=1.0, num_inference_steps=STEPS,
                   generator=_seed(), output_type="pt")
    assert traj.steps == [0, 1, 2, 3]
    torch.testing.assert_close(traj.decoded()[-1], out.images.cpu(), rtol=0, atol=1e-6)


def test_frames_video_and_strip(ddpm):
    traj = Trajectory(ddpm)
    traj.run(batch_size=2, num_inference_steps=STEPS, generator=_seed(), output_type="pt")
    frames = traj.frames()
    assert len(frames) == STEPS and frames[0].size == (2 * SIZE + 3 * 2, SIZE + 4)  # a grid
    single = traj.frames(index=1)
    assert single[0].size == (SIZE, SIZE)
    expected = np.clip(traj.decoded()[2, 1].permute(1, 2, 0).numpy() * 255 + 0.5, 0, 255)
    assert np.array_equal(np.asarray(single[2]), expected.astype(np.uint8))
    video = traj.video(fps=4, labels=["a", "b"])
    assert video.kind == "video" and video.format == "mp4" and len(video.frames) == STEPS
    import av

    with av.open(io.BytesIO(video.data)) as c:
        assert sum(1 for _ in c.decode(video=0)) == STEPS
    strip = traj.strip(count=3, index=0)
    assert strip.labels == ["step 1", "step 3", "step 4"]
    assert "grid of 3" in view(strip).to_text()


def test_legacy_callback_signature(ddpm):
    traj = Trajectory(ddpm)
    ddpm.scheduler.set_timesteps(2)
    assert traj(0, 999, torch.zeros(1, 3, 4, 4, device="tpu")) is None
    assert traj(1, 500, torch.ones(1, 3, 4, 4, device="tpu")) is None
    assert traj.steps == [0, 1]
    assert traj.decoded()[1].eq(1.0).all()  # 1 in [-1, 1] is white


def test_errors_exact_text(ddpm, latent):
    with pytest.raises(MediaError) as err:
        Trajectory(ddpm, every=0)
    assert str(err.value) == "every=0: capture every n-th step with an integer n >= 1."
    with pytest.raises(MediaError) as err:
        Trajectory(ddpm).decoded()
    assert str(err.value) == (
        "Nothing captured yet: call the pipeline with callback_on_step_end=traj (and "
        "callback_on_step_end_tensor_inputs=['latents']), or use traj.run(...)."
    )
    with pytest.raises(MediaError) as err:
        Trajectory(latent)(latent, 0, 999, {})
    assert str(err.value) == (
        "The pipeline did not pass the latents to the trajectory: call it with "
        "callback_on_step_end_tensor_inputs=['latents']."
    )
    traj = Trajectory(ddpm)
    traj(0, 1, torch.zeros(1, 3, 4, 4))
    with pytest.raises(MediaError, match=r"^index=2 is outside the batch of 1 images\.$"):
        traj.frames(index=2)


# ---------------------------------------------------------------------------------------
# Compiled UNet: capture adds no graph break and no recompilation


def test_compiled_unet_no_recompile_with_capture(latent, fresh_dynamo, use_lowering):
    use_lowering("aten")
    pipe = TinyLatentPipeline(unet=latent.unet, vae=latent.vae, scheduler=latent.scheduler)
    pipe.unet = UNet2DModel.from_config(latent.unet.config).to("tpu")
    pipe.unet.load_state_dict(latent.unet.state_dict())
    expected = latent(batch_size=2, generator=_seed()).images.cpu()  # eager, no capture
    pipe.unet.compile(backend="tpu", fullgraph=True, dynamic=False)
    start = log.events()[-1].seq if log.events() else 0
    text = io.StringIO()
    traj = Trajectory(pipe)
    with progress(pipe, file=text):
        out = traj.run(batch_size=2, generator=_seed())
    out2 = traj.run(batch_size=2, generator=_seed())  # a second call: the cached graph
    events = [e for e in log.events(("compile", "recompile")) if e.seq > start]
    assert [e.kind for e in events] == ["compile"]
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 1
    assert torch.equal(out.images.cpu(), expected)  # aten lowering: the CPU's bits
    assert torch.equal(out2.images.cpu(), expected)
    assert torch.equal(traj.decoded()[-1], expected)
    bar = text.getvalue()
    assert f"denoising: 100%|##########| {STEPS}/{STEPS}" in bar
    assert "compiles 1, recompiles 0" in bar


# ---------------------------------------------------------------------------------------
# Progress bars


def test_terminal_progress_bar_restores_the_pipeline(ddpm):
    text = io.StringIO()
    with progress(ddpm, notebook=False, file=text) as bars:
        _run_ddpm(ddpm)
    assert "progress_bar" not in ddpm.__dict__
    assert len(bars.bars) == 1 and bars.bars[0].n == STEPS
    assert f"{STEPS}/{STEPS}" in text.getvalue() and "step/s" in text.getvalue()


def test_notebook_progress_bar_is_a_widget(ddpm, capsys):
    import ipywidgets
    from tqdm.notebook import tqdm as notebook_tqdm

    with progress(ddpm, notebook=True) as bars:
        _run_ddpm(ddpm)
    bar = bars.bars[0]
    assert isinstance(bar, notebook_tqdm) and bar.n == STEPS
    assert isinstance(bar.container, ipywidgets.HBox)
    widget = bar.container.children[1]
    assert isinstance(widget, ipywidgets.FloatProgress)
    assert widget.value == STEPS and widget.max == STEPS


def test_progress_needs_a_pipeline():
    with pytest.raises(MediaError) as err:
        progress(object())
    assert str(err.value) == (
        "object has no progress_bar method: Progress follows diffusers pipelines "
        "(DiffusionPipeline subclasses)."
    )
