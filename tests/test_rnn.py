"""Recurrent layers on "tpu": ATen sends an accelerator's LSTM and GRU steps to the fused cells
(``_thnn_fused_lstm_cell``, ``_thnn_fused_gru_cell`` and their backward ops), which have no CPU
kernel; the device computes them as CUDA does. Results and gradients equal the CPU's to float32
rounding (the fused cell adds the gate biases apart from the matmuls), on both cores."""

from __future__ import annotations

import copy

import pytest
import torch

import tpu_lab  # noqa: F401  (installs the "tpu" device)

LAYERS = {
    "LSTM": lambda bias: torch.nn.LSTM(4, 8, num_layers=2, bias=bias),
    "GRU": lambda bias: torch.nn.GRU(4, 8, bias=bias),
    "LSTMCell": lambda bias: torch.nn.LSTMCell(4, 8, bias=bias),
    "GRUCell": lambda bias: torch.nn.GRUCell(4, 8, bias=bias),
}


def _first(out):
    return out[0] if isinstance(out, tuple) else out


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("name", list(LAYERS))
def test_recurrent_layers_match_the_cpu_forward_and_backward(name, bias):
    torch.manual_seed(0)
    cpu = LAYERS[name](bias)
    tpu = copy.deepcopy(cpu).to("tpu")
    x = torch.randn(5, 2, 4) if name in ("LSTM", "GRU") else torch.randn(3, 4)
    expected = _first(cpu(x))
    got = _first(tpu(x.to("tpu")))
    assert got.device.type == "tpu"
    torch.testing.assert_close(got.cpu(), expected, atol=1e-6, rtol=1e-6)
    (expected * torch.arange(expected.numel()).view_as(expected)).sum().backward()
    weights = torch.arange(got.numel(), device="tpu").view_as(got)
    (got * weights).sum().backward()
    for (n, p), q in zip(cpu.named_parameters(), tpu.parameters(), strict=True):
        torch.testing.assert_close(q.grad.cpu(), p.grad, atol=1e-5, rtol=1e-5, msg=n)


def test_an_lstm_cell_with_a_given_state_and_no_gradient():
    torch.manual_seed(1)
    cell = torch.nn.LSTMCell(3, 5)
    x, h, c = torch.randn(2, 3), torch.randn(2, 5), torch.randn(2, 5)
    with torch.no_grad():
        expected = cell(x, (h, c))
        got = copy.deepcopy(cell).to("tpu")(x.to("tpu"), (h.to("tpu"), c.to("tpu")))
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g.cpu(), e, atol=1e-6, rtol=1e-6)
