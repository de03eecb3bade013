"""The embedded model: a tiny class-conditional diffusion model of handwritten digits.

Trained by ``scripts/train_digits.py`` (on the "tpu" device) on scikit-learn's handwritten
digits (1,797 images of 8x8 pixels, 16 grey levels, shipped with scikit-learn) and shipped in
``tpu_lab/models/digits/`` as a diffusers pipeline folder: ``model_index.json``, a
``UNet2DModel`` with a class embedding (``unet/``, safetensors) and a ``DDIMScheduler``
(``scheduler/``). :func:`digits_pipeline` loads it with ``DigitsPipeline.from_pretrained``, the
normal diffusers path, offline.

Images are 8x8, one channel, in [-1, 1] while denoising (the "latents": this model has no VAE,
so latents are pixels). Class 10 is the "no class" label used for classifier-free guidance (the
model was trained with 10% of its labels replaced by it).

Guidance, measured (100 samples, 10 per class, 32 DDIM steps, seeds 0 and 1; the share that an
SVM trained on the real digits puts in the requested class): 0.98/0.97 at guidance 1,
0.99/0.99 at 1.5, 0.78/0.86 at 2, 0.22/0.24 at 3, 0.03/0.04 at 5. Past 1.5 the difference
between the conditional and unconditional noise predictions, which guidance amplifies, is mostly
the unconditional model's error on 8x8 pixels: speckle that reads as no digit (clipping the
predicted image to [-1, 1] does not help: 0.22 at 3). So the default is
:data:`DEFAULT_GUIDANCE` (1.5) and the demo's slider stops at :data:`MAX_GUIDANCE` (2).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .. import _install
from ..errors import DigitsInputError, TpuLabError

try:
    import torch
    from diffusers import DiffusionPipeline
    from diffusers.pipelines.pipeline_utils import ImagePipelineOutput
    from diffusers.utils.torch_utils import randn_tensor
except ImportError as exc:
    raise ImportError(
        f"The digits model needs diffusers and safetensors: {_install.hint('hf')}"
    ) from exc

#: The pipeline folder shipped inside the package.
FOLDER = Path(__file__).with_name("digits")
#: The digit classes the model draws.
CLASSES = tuple(range(10))
#: The label meaning "any digit" (the unconditional half of classifier-free guidance).
NULL_CLASS = 10
#: The guidance scale that helps most (see the measurements above) and the largest that works.
DEFAULT_GUIDANCE = 1.5
MAX_GUIDANCE = 2.0
#: Pixels per side of the generated images (the dataset's own resolution).
SIZE = 8
#: The UNet of the shipped model (about 650k parameters, 2.6 MB of float32).
UNET_CONFIG: dict[str, Any] = {
    "sample_size": SIZE,
    "in_channels": 1,
    "out_channels": 1,
    "layers_per_block": 1,
    "block_out_channels": (32, 64),
    "down_block_types": ("DownBlock2D", "DownBlock2D"),
    "up_block_types": ("UpBlock2D", "UpBlock2D"),
    "norm_num_groups": 8,
    "num_class_embeds": NULL_CLASS + 1,
}
#: The noise schedule of training (DDPM, 1000 steps, cosine); sampling uses DDIM on it.
SCHEDULE: dict[str, Any] = {"num_train_timesteps": 1000, "beta_schedule": "squaredcos_cap_v2"}


class DigitsPipeline(DiffusionPipeline):
    """Draws handwritten digits of the requested classes.

    ``pipe(class_labels=[7, 3], num_inference_steps=32, generator=g)`` returns an
    ``ImagePipelineOutput`` whose ``.images`` are 8x8 greyscale images (ink is white, as
    in the dataset): PIL images (``output_type="pil"``), a float array ``(B, 8, 8, 1)``
    in [0, 1] (``"np"``) or a tensor ``(B, 1, 8, 8)`` in [0, 1] on the pipeline's device
    (``"pt"``). ``guidance_scale`` > 1 turns on classifier-free guidance (the UNet then
    runs on twice the batch); the default, 1.5, draws the requested digit most often, 1.0
    turns it off, and above 2 samples turn to speckle.
    ``callback_on_step_end(pipe, step, timestep, kwargs)`` gets ``{"latents": x}`` (pixels in
    [-1, 1]) after every step and may replace it.
    """

    model_cpu_offload_seq = "unet"
    _callback_tensor_inputs = ["latents"]

    def __init__(self, unet, scheduler):
        super().__init__()
        self.register_modules(unet=unet, scheduler=scheduler)

    @torch.no_grad()
    def __call__(
        self,
        class_labels: int | Sequence[int],
        num_inference_steps: int = 32,
        guidance_scale: float = DEFAULT_GUIDANCE,
        generator: torch.Generator | list[torch.Generator] | None = None,
        latents: torch.Tensor | None = None,
        output_type: str = "pil",
        return_dict: bool = True,
        callback_on_step_end: Callable[..., dict] | None = None,
        callback_on_step_end_tensor_inputs: Sequence[str] = ("latents",),
    ):
        labels = _check_labels(class_labels)
        _check_call(num_inference_steps, guidance_scale, output_type)
        unknown = set(callback_on_step_end_tensor_inputs) - set(self._callback_tensor_inputs)
        if unknown:
            raise DigitsInputError(
                f"callback_on_step_end_tensor_inputs={list(callback_on_step_end_tensor_inputs)}"
                f": this pipeline passes only {self._callback_tensor_inputs}."
            )
        device = self._execution_device
        config = self.unet.config
        shape = (len(labels), config.in_channels, config.sample_size, config.sample_size)
        if latents is None:
            latents = randn_tensor(shape, generator=generator, device=device, dtype=self.dtype)
        elif tuple(latents.shape) != shape:
            raise DigitsInputError(
                f"latents of shape {tuple(latents.shape)} for {len(labels)} labels: "
                f"pass a tensor of shape {shape}."
            )
        else:
            latents = latents.to(device=device, dtype=self.dtype)
        latents = latents * self.scheduler.init_noise_sigma
        guided = guidance_scale > 1.0
        conditions = torch.tensor(labels, device=device)
        if guided:
            nulls = torch.full_like(conditions, NULL_CLASS)
            conditions = torch.cat([conditions, nulls])
        # Timesteps stay on the host: the scheduler indexes its host tables with them (a
        # device timestep would make every step a sync point); the UNet gets a device copy.
        self.scheduler.set_timesteps(num_inference_steps)
        timesteps = self.scheduler.timesteps
        with self.progress_bar(total=len(timesteps)) as bar:
            for i, t in enumerate(timesteps):
                model_input = torch.cat([latents, latents]) if guided else latents
                model_input = self.scheduler.scale_model_input(model_input, t)
                # A timestep tensor of fixed shape: a compiled UNet sees a new value,
                # never a new graph, at every step.
                step = t.to(device).expand(model_input.shape[0])
                noise = self.unet(model_input, step, class_labels=conditions).sample
                if guided:
                    cond, uncond = noise.chunk(2)
                    noise = uncond + guidance_scale * (cond - uncond)
                latents = self.scheduler.step(
                    noise, t, latents, generator=generator
                ).prev_sample
                if callback_on_step_end is not None:
                    wanted = "latents" in callback_on_step_end_tensor_inputs
                    tensors = {"latents": latents} if wanted else {}
                    outputs = callback_on_step_end(self, i, t, tensors)
                    latents = outputs.pop("latents", latents)
                bar.update()
        images = (latents / 2 + 0.5).clamp(0, 1)
        if output_type != "pt":
            images = images.cpu().permute(0, 2, 3, 1).float().numpy()
            if output_type == "pil":
                images = self.numpy_to_pil(images)
        self.maybe_free_model_hooks()
        if not return_dict:
            return (images,)
        return ImagePipelineOutput(images=images)


def _check_labels(class_labels) -> list[int]:
    labels = [class_labels] if isinstance(class_labels, int) else list(class_labels)
    if not labels:
        raise DigitsInputError("class_labels is empty: pass one digit (0-9) per image wanted.")
    bad = [c for c in labels if isinstance(c, bool) or not isinstance(c, int) or c not in CLASSES]
    if bad:
        raise DigitsInputError(
            f"class_labels {bad} are not digits: each label must be an int from 0 to 9."
        )
    return labels


def _check_call(steps, guidance_scale, output_type) -> None:
    if isinstance(steps, bool) or not isinstance(steps, int) or not 1 <= steps <= 1000:
        raise DigitsInputError(
            f"num_inference_steps={steps!r}: use an int from 1 to 1000 (the model was trained "
            "with 1000 noise levels; 32 is plenty)."
        )
    if not isinstance(guidance_scale, (int, float)) or guidance_scale < 1.0:
        raise DigitsInputError(
            f"guidance_scale={guidance_scale!r}: use 1.0 (no guidance) or more."
        )
    if output_type not in ("pil", "np", "pt"):
        raise DigitsInputError(f"output_type={output_type!r}: use 'pil', 'np' or 'pt'.")


def digits_pipeline(device: str = "tpu", path: str | Path | None = None):
    """The digits pipeline from ``path`` (default: the model shipped in the package), loaded
    with ``DigitsPipeline.from_pretrained`` (offline: a local folder) and moved to ``device``."""
    folder = Path(path) if path is not None else FOLDER
    if not (folder / "model_index.json").is_file():
        raise TpuLabError(
            f"{folder} is not a diffusers pipeline folder (no model_index.json): pass the "
            "folder written by DigitsPipeline.save_pretrained or scripts/train_digits.py."
        )
    return DigitsPipeline.from_pretrained(folder).to(device)
