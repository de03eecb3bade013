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
