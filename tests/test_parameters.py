"""Parameters, storages and autocast behave on "tpu" as on CUDA: model.to keeps Parameter
objects (tied weights stay tied), ``param.data = t`` works across devices, storages resize,
``torch.autocast("tpu")`` defaults to bfloat16 as TorchTPU's does."""

from __future__ import annotations

import pytest
import torch

import tpu_lab  # noqa: F401  (installs the "tpu" device)


def test_model_to_keeps_parameter_objects():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4))
    before = list(model.parameters())
    weight = model[0].weight
    model.to("tpu")
    assert [p is q for p, q in zip(model.parameters(), before, strict=True)] == [True] * 4
    assert weight.device.type == "tpu"  # a reference taken before .to() follows the model
    model.to("cpu")
    assert model[0].weight is weight and weight.device.type == "cpu"


def test_tied_weights_stay_tied():
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(
        vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=32, max_position_embeddings=16,
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.BertForMaskedLM(config).eval()
    decoder, embeddings = model.cls.predictions.decoder, model.bert.embeddings.word_embeddings
    assert decoder.weight is embeddings.weight
    ids = torch.randint(0, 50, (1, 6))
    with torch.no_grad():
        expected = model(ids).logits
    model.to("tpu")
    assert model.cls.predictions.decoder.weight is model.bert.embeddings.word_embeddings.weight
    with torch.no_grad():
        model.bert.embeddings.word_embeddings.weight[0, 0] += 1.0
        assert model.cls.predictions.decoder.weight[0, 0].item() == embeddings.weight[0, 0].item()
        model.bert.embeddings.word_embeddings.weight[0, 0] -= 1.0
        assert torch.equal(model(ids.to("tpu")).logits.cpu(), expected)


def test_param_data_assignment_across_devices():
    p = torch.nn.Parameter(torch.zeros(3))
    p.data = torch.arange(3.0, device="tpu")
    assert p.device.type == "tpu" and isinstance(p, torch.nn.Parameter)
    assert p.cpu().tolist() == [0.0, 1.0, 2.0]
    p.data = torch.ones(2)
    assert p.device.type == "cpu" and p.tolist() == [1.0, 1.0]


def test_storage_resize_keeps_bytes_and_charges_hbm():
    x = torch.arange(4, dtype=torch.float32, device="tpu")
    storage = x.untyped_storage()
    before = torch.accelerator.memory_allocated()
    storage.resize_(64)
    assert storage.nbytes() == 64
    assert torch.accelerator.memory_allocated() - before == 64 - 16
    assert x.cpu().tolist() == [0.0, 1.0, 2.0, 3.0]
    storage.resize_(0)
    assert torch.accelerator.memory_allocated() - before == -16


def test_autocast_defaults_to_bfloat16():
    a = torch.randn(4, 4, device="tpu")
    with torch.autocast("tpu"):
        assert (a @ a).dtype == torch.bfloat16
    assert torch.get_autocast_dtype("tpu") == torch.bfloat16
