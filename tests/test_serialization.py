"""copy.deepcopy, pickle and torch.save/load of "tpu" tensors, views, modules and optimizer
state: bitwise round trips, compared with the CPU originals."""

from __future__ import annotations

import copy
import io
import pickle

import pytest
import torch

import tpu_lab  # noqa: F401  (installs the "tpu" device)


def _cpu(value):
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, dict):
        return {k: _cpu(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_cpu(v) for v in value)
    return value


def _assert_same(a, b):
    a, b = _cpu(a), _cpu(b)
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert torch.equal(a.view(torch.uint8) if a.dtype == torch.bool else a, b)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            _assert_same(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            _assert_same(x, y)
    else:
        assert a == b


def _pickle(value):
    return pickle.loads(pickle.dumps(value))


def _save_load(value):
    buffer = io.BytesIO()
    torch.save(value, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=False)


ROUND_TRIPS = {"deepcopy": copy.deepcopy, "pickle": _pickle, "save_load": _save_load}


@pytest.fixture(params=sorted(ROUND_TRIPS))
def round_trip(request):
    return ROUND_TRIPS[request.param]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool])
def test_tensor_round_trip_is_bitwise(round_trip, dtype):
    cpu = (torch.randn(5, 7) * 100).to(dtype)
    tpu = cpu.to("tpu")
    copied = round_trip(tpu)
    assert copied.device.type == "tpu"
    _assert_same(copied, cpu)
    tpu.add_(1) if dtype != torch.bool else tpu.logical_not_()
    _assert_same(copied, cpu)  # a copy, not an alias


def test_views_keep_their_geometry_and_sharing(round_trip):
    cpu = torch.arange(24.0).reshape(4, 6)
    base = cpu.to("tpu")
    views = {"t": base.t(), "row": base[1], "cols": base[:, 2:5], "base": base}
    copied = round_trip(views)
    for name, view in views.items():
        assert copied[name].stride() == view.stride(), name
        _assert_same(copied[name], view)
    # the copies share a storage exactly where the same round trip of CPU tensors does
    # (deepcopy and torch.save keep sharing; pickle copies each tensor's storage)
    cpu_copied = round_trip({"row": cpu[1], "base": cpu})
    cpu_copied["base"][1, 0] = -1.0
    copied["base"][1, 0] = -1.0
    assert copied["row"][0].item() == cpu_copied["row"][0].item()


def test_module_and_optimizer_state(round_trip):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    model.to("tpu")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    x = torch.randn(3, 8, device="tpu")
    model(x).square().mean().backward()
    optimizer.step()
    copied_model = round_trip(model)
    copied_state = round_trip(optimizer.state_dict())
    _assert_same(copied_model.state_dict(), model.state_dict())
    _assert_same(copied_state, optimizer.state_dict())
    _assert_same(copied_model(x), model(x))


def test_deepcopied_model_trains_like_the_original():
    """Diffusers' and Transformers' tests deepcopy a model and train both copies."""
    torch.manual_seed(0)
    model = torch.nn.Linear(6, 3).to("tpu")
    twin = copy.deepcopy(model)
    x = torch.randn(4, 6, device="tpu")
    losses = []
    for m in (model, twin):
        loss = m(x).square().mean()
        loss.backward()
        losses.append(loss.item())
    assert losses[0] == losses[1]
    _assert_same(model.weight.grad, twin.weight.grad)
