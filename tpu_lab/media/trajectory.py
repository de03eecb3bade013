"""The denoising trajectory of a diffusers pipeline, captured step by step and decoded afterwards.

``Trajectory(pipe)`` is a step callback: pass it as ``callback_on_step_end=traj`` (with
``callback_on_step_end_tensor_inputs=["latents"]``). Each captured step copies the latents to
the host; the callback runs between steps, outside the compiled transformer/UNet, so capture
adds no graph break and no recompilation. Decoding waits until :meth:`Trajectory.frames` /
:meth:`Trajectory.video`: through the pipeline's VAE when it has one (``latents /
scaling_factor + shift_factor``), else the latents are the images (1 or 3 channels, in [-1, 1];
other channel counts show their first three channels stretched from min..max).

Pipelines without ``callback_on_step_end`` (``DDPMPipeline``, ``DiTPipeline`` in diffusers
0.42) are captured by wrapping their scheduler's ``step`` for the duration of a ``with traj:``
block; :meth:`Trajectory.run` picks the right way for any pipeline.
"""

from __future__ import annotations

import inspect
from typing import Any

from ..errors import MediaError
from .convert import to_media
from .grid import grid
from .previews import Preview, preview


class Trajectory:
    """Latents of every ``every``-th denoising step (and of the last one), on the host."""

    def __init__(self, pipe: Any, every: int = 1) -> None:
        if not isinstance(every, int) or isinstance(every, bool) or every < 1:
            raise MediaError(f"every={every!r}: capture every n-th step with an integer n >= 1.")
        self.pipe = pipe
        self.every = every
        self.steps: list[int] = []
        self._latents: list[Any] = []
        self._decoded: Any = None
        self._hooked_step: int | None = None
        self._saved_step: Any = None

    @property
    def tensor_inputs(self) -> list[str]:
        """What the pipeline must hand the callback (as diffusers' ``PipelineCallback``)."""
        return ["latents"]

    def clear(self) -> None:
        self.steps, self._latents, self._decoded = [], [], None

    def __len__(self) -> int:
        return len(self._latents)

    # -- capture ------------------------------------------------------------------------

    def _total_steps(self) -> int | None:
        count = getattr(self.pipe, "_num_timesteps", None)
        if isinstance(count, int):
            return count
        timesteps = getattr(getattr(self.pipe, "scheduler", None), "timesteps", None)
        return len(timesteps) if timesteps is not None else None

    def _capture(self, step: int, latents: Any) -> None:
        if step == 0:
            self.clear()
        total = self._total_steps()
        if step % self.every == 0 or (total is not None and step == total - 1):
            self.steps.append(step)
            self._latents.append(latents.detach().to("cpu", copy=True))
            self._decoded = None

    def __call__(self, *args: Any) -> Any:
        """``callback_on_step_end(pipe, step, timestep, callback_kwargs)`` (returns the
        kwargs unchanged), or the legacy ``callback(step, timestep, latents)``."""
        if self._hooked_step is not None:  # the scheduler hook already captures
            return args[3] if len(args) == 4 else None
        if len(args) == 4:
            _, step, _, callback_kwargs = args
            latents = callback_kwargs.get("latents")
            if latents is None:
                raise MediaError(
                    "The pipeline did not pass the latents to the trajectory: call it with "
                    "callback_on_step_end_tensor_inputs=['latents']."
                )
            self._capture(int(step), latents)
            return callback_kwargs
        if len(args) == 3:
            step, _, latents = args
            self._capture(int(step), latents)
            return None
        raise TypeError(
            "A Trajectory is called by the pipeline as callback_on_step_end(pipe, step, "
            f"timestep, kwargs) or callback(step, timestep, latents); got {len(args)} arguments."
        )

    def __enter__(self) -> Trajectory:
        scheduler = getattr(self.pipe, "scheduler", None)
        if scheduler is None:
            raise MediaError(
                f"{type(self.pipe).__name__} has no scheduler to follow: pass the trajectory "
                f"as callback_on_step_end instead."
            )
        original = scheduler.step
        self._saved_step = scheduler.__dict__.get("step")
        self.clear()
        self._hooked_step = 0

        def step(*args: Any, **kwargs: Any) -> Any:
            out = original(*args, **kwargs)
            sample = out.prev_sample if hasattr(out, "prev_sample") else out[0]
            self._capture(self._hooked_step, sample)
            self._hooked_step += 1
            return out

        scheduler.step = step
        return self

    def __exit__(self, *exc: Any) -> None:
        scheduler = self.pipe.scheduler
        if self._saved_step is None:
            del scheduler.step
        else:
            scheduler.step = self._saved_step
        self._hooked_step = None
        self._saved_step = None

    def run(self, **kwargs: Any) -> Any:
        """Call the pipeline with ``kwargs``, capturing its trajectory; returns its output."""
        params = inspect.signature(self.pipe.__call__).parameters
        if "callback_on_step_end" in params:
            if kwargs.get("callback_on_step_end") not in (None, self):
                raise MediaError(
                    "run() passes the trajectory as callback_on_step_end: call the pipeline "
                    "yourself to combine it with another callback."
                )
            inputs = list(kwargs.get("callback_on_step_end_tensor_inputs") or [])
            kwargs["callback_on_step_end"] = self
            kwargs["callback_on_step_end_tensor_inputs"] = [*inputs, "latents"] if (
                "latents" not in inputs
            ) else inputs
            return self.pipe(**kwargs)
        with self:
            return self.pipe(**kwargs)

    # -- decode -------------------------------------------------------------------------

    def _decode_one(self, latents: Any) -> Any:
        import torch

        if latents.ndim != 4:
            raise MediaError(
                f"Latents of shape {tuple(latents.shape)} are not (batch, channels, height, "
                f"width): packed or video latents need the pipeline's own unpacking before "
                f"decoding."
            )
        vae = getattr(self.pipe, "vae", None)
        if vae is not None:
            config = vae.config
            z = latents.to(vae.device, vae.dtype) / config.scaling_factor
            shift = getattr(config, "shift_factor", None)
            if shift:
                z = z + shift
            with torch.no_grad():
                image = vae.decode(z, return_dict=False)[0]
            return (image.float().cpu() / 2 + 0.5).clamp(0, 1)
        x = latents.float()
        if x.shape[1] in (1, 3):
            return (x / 2 + 0.5).clamp(0, 1)
        x = x[:, :3]
        low = x.amin(dim=(1, 2, 3), keepdim=True)
        high = x.amax(dim=(1, 2, 3), keepdim=True)
        return (x - low) / (high - low).clamp_min(1e-12)

    def decoded(self) -> Any:
        """All captured steps decoded: a CPU tensor (steps, batch, C, H, W) in [0, 1]."""
        import torch

        if not self._latents:
            raise MediaError(
                "Nothing captured yet: call the pipeline with callback_on_step_end=traj "
                "(and callback_on_step_end_tensor_inputs=['latents']), or use traj.run(...)."
            )
        if self._decoded is None:
            self._decoded = torch.stack([self._decode_one(z) for z in self._latents])
        return self._decoded

    def _select(self, index: int | None) -> Any:
        decoded = self.decoded()
        if index is None:
            return decoded
        batch = decoded.shape[1]
        if not -batch <= index < batch:
            raise MediaError(f"index={index} is outside the batch of {batch} images.")
        return decoded[:, index : index + 1 if index != -1 else None]

    def frames(self, index: int | None = None) -> list:
        """One PIL image per captured step (a grid of the batch, or image ``index``)."""
        media = to_media(self._select(index), layout="TNCHW", value_range="0,1")
        return [grid(step) for step in media.frames]

    def video(self, fps: float = 8, index: int | None = None, labels: Any = None) -> Preview:
        """The trajectory as an inline video (H.264 MP4), one frame per captured step."""
        return preview(self._select(index), layout="TNCHW", value_range="0,1", fps=fps,
                       labels=labels)

    def strip(self, count: int = 8, index: int = 0) -> Preview:
        """``count`` evenly spaced steps of image ``index`` side by side, labelled by step."""
        if not isinstance(count, int) or count < 1:
            raise MediaError(f"count={count!r}: show at least 1 step.")
        decoded = self._select(index)[:, 0]
        n = len(self.steps)
        picks = sorted({round(i * (n - 1) / max(count - 1, 1)) for i in range(min(count, n))})
        return preview(decoded[picks], layout="NCHW", value_range="0,1",
                       labels=[f"step {self.steps[i] + 1}" for i in picks])
