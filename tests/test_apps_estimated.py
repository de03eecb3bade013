"""The estimated TPU time of a demo's request (:mod:`tpu_lab.apps.estimated`): parts costed from
their configs, kept per config, chips, shapes and mode; a model the estimates do not cover is
named in the panel instead of failing the request."""

from __future__ import annotations

import types

import pytest
import torch

import tpu_lab.sharding
from tpu_lab.apps import estimated
from tpu_lab.apps.estimated import Call, engine_size, estimate_request
from tpu_lab.models.digits import UNET_CONFIG


@pytest.fixture
def pipe():
    from diffusers import UNet2DModel

    with torch.device("meta"):
        return types.SimpleNamespace(unet=UNet2DModel(**UNET_CONFIG))


def test_a_request_is_its_parts_and_repeats_cost_look_ups(pipe, monkeypatch):
    estimated._KEPT.clear()
    planned = []
    real = tpu_lab.sharding.plan
    monkeypatch.setattr(tpu_lab.sharding, "plan",
                        lambda *a, **k: planned.append(k) or real(*a, **k))  # fmt: skip

    def request(steps, batch=4, mode="fuse"):
        call = Call("UNet", "unet", steps, batch, image_size=(8, 8))
        return estimate_request(pipe, [call], chips=1, mode=mode, items=batch, unit="image")

    four = request(4)
    step = real({"_class_name": "UNet2DModel", **pipe.unet.config}, chips=1, batch=4,
                image_size=(8, 8)).estimate("forward", mode="fuse")
    assert four.seconds == 4 * step.seconds and four.per_item == step.seconds
    assert four.parts[0].seconds_per_call == step.seconds and four.parts[0].bound == step.bound
    assert len(planned) == 1
    assert request(20).seconds == 20 * step.seconds and len(planned) == 1  # kept
    assert request(4, batch=8).seconds != four.seconds and len(planned) == 2
    assert request(4, mode="eager").seconds > four.seconds and len(planned) == 3


def test_the_panel_shows_the_steps_peak_hbm_as_the_plan_does(pipe):
    from diffusers import AutoencoderKL

    from tpu_lab.units import format_bytes

    estimated._KEPT.clear()
    with torch.device("meta"):
        vae = AutoencoderKL(block_out_channels=(8, 16), layers_per_block=1, norm_num_groups=4,
                            latent_channels=4, down_block_types=("DownEncoderBlock2D",) * 2,
                            up_block_types=("UpDecoderBlock2D",) * 2)
    both = types.SimpleNamespace(unet=pipe.unet, vae=vae)
    calls = [Call("UNet", "unet", 4, 2, image_size=(64, 64)),
             Call("VAE", "vae", 1, 2, image_size=(64, 64))]
    result = estimate_request(both, calls, chips=1, mode="eager", items=2, unit="image")
    one = {name: tpu_lab.sharding.plan({"_class_name": type(m).__name__, **m.config}, chips=1,
                                       batch=2, image_size=(64, 64)).estimate(
                                           "forward", mode="eager").memory
           for name, m in (("unet", pipe.unet), ("vae", vae))}
    weights = sum(m.of("weights") for m in one.values())
    extra = max(m.peak_bytes - m.of("weights") for m in one.values())
    assert result.peak_hbm_bytes == pytest.approx(weights + extra)
    assert result.text().endswith(f"; peak HBM {format_bytes(int(weights + extra))} per chip")
    assert result.to_dict()["peak_hbm_bytes_per_chip"] == result.peak_hbm_bytes


def test_a_model_without_estimates_is_named_not_raised():
    from diffusers import UNet1DModel

    with torch.device("meta"):
        pipe = types.SimpleNamespace(unet=UNet1DModel())
    call = Call("UNet", "unet", 4, 1, image_size=(8, 8))
    result = estimate_request(pipe, [call], chips=1, mode="eager", items=1, unit="image")
    assert result.text().startswith(
        "TPU time: no estimate for this pipeline: No estimate for diffusers' UNet1DModel yet; "
        "estimated: AutoencoderKL, AutoencoderKLWan, FluxTransformer2DModel,"
    )
    assert result.to_dict()["label"] == "no estimate"


def test_engine_sizes_give_the_pipelines_latents():
    assert engine_size(32, 4) == (64, 64)  # the shapes VAE: 32 pixels are 8 latent pixels
    assert engine_size(1024, 8) == (1024, 1024)
