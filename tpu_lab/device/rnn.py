"""The fused RNN cells ATen asks an accelerator for (both cores).

For a device other than the CPU, ``nn.LSTM``/``LSTMCell``/``GRU``/``GRUCell`` compute each step
with ``_thnn_fused_lstm_cell`` / ``_thnn_fused_gru_cell`` (and their backward ops), which have
CUDA kernels and no CPU kernel. These are the CUDA kernels' arithmetic (``ATen/native/cuda/
RNN.cu``) in torch ops on the device: the same gate order, the same sums in the same order, the
same workspace. The CPU's unfused cell adds the biases inside its matmuls, so results agree with
the CPU's to float32 rounding, not bit for bit (as CUDA's do).
"""

from __future__ import annotations

import torch


def _gates(input_gates, hidden_gates, input_bias, hidden_bias, chunks: int):
    gates = input_gates + hidden_gates
    if input_bias is not None:
        gates = gates + input_bias + hidden_bias
    return gates.chunk(chunks, 1)


def lstm_cell(input_gates, hidden_gates, cx, input_bias=None, hidden_bias=None):
    i, f, g, o = _gates(input_gates, hidden_gates, input_bias, hidden_bias, 4)
    i, f, g, o = i.sigmoid(), f.sigmoid(), g.tanh(), o.sigmoid()
    cy = f * cx + i * g
    hy = o * cy.tanh()
    return hy, cy, torch.cat([i, f, g, o], 1)


def lstm_cell_backward(grad_hy, grad_cy, cx, cy, workspace, has_bias: bool):
    i, f, g, o = workspace.chunk(4, 1)
    if grad_hy is None:
        grad_hy = torch.zeros_like(cy)
    tanh_cy = cy.tanh()
    grad_o = grad_hy * tanh_cy * ((1 - o) * o)
    grad_c = grad_hy * o * (1 - tanh_cy * tanh_cy)
    if grad_cy is not None:
        grad_c = grad_c + grad_cy
    grad_i = grad_c * g * ((1 - i) * i)
    grad_f = grad_c * cx * ((1 - f) * f)
    grad_g = grad_c * i * (1 - g * g)
    grad_gates = torch.cat([grad_i, grad_f, grad_g, grad_o], 1)
    grad_bias = grad_gates.sum(0) if has_bias else None
    return grad_gates, grad_c * f, grad_bias


def gru_cell(input_gates, hidden_gates, hx, input_bias=None, hidden_bias=None):
    if input_bias is not None:
        input_gates = input_gates + input_bias
        hidden_gates = hidden_gates + hidden_bias
    ir, ii, in_ = input_gates.chunk(3, 1)
    hr, hi, hn = hidden_gates.chunk(3, 1)
    r = (ir + hr).sigmoid()
    z = (ii + hi).sigmoid()
    n = (in_ + r * hn).tanh()
    hy = n + z * (hx - n)
    return hy, torch.cat([r, z, n, hx, hn], 1)


def gru_cell_backward(grad_hy, workspace, has_bias: bool):
    r, z, n, hx, hn = workspace.chunk(5, 1)
    grad_z = grad_hy * (hx - n) * ((1 - z) * z)
    grad_hx = grad_hy * z
    grad_in = grad_hy * (1 - z) * (1 - n * n)
    grad_hn = grad_in * r
    grad_r = grad_in * hn * ((1 - r) * r)
    grad_input = torch.cat([grad_r, grad_z, grad_in], 1)
    grad_hidden = torch.cat([grad_r, grad_z, grad_hn], 1)
    if not has_bias:
        return grad_input, grad_hidden, grad_hx, None, None
    return grad_input, grad_hidden, grad_hx, grad_input.sum(0), grad_hidden.sum(0)


KERNELS = {
    "_thnn_fused_lstm_cell": lstm_cell,
    "_thnn_fused_lstm_cell_backward_impl": lstm_cell_backward,
    "_thnn_fused_gru_cell": gru_cell,
    "_thnn_fused_gru_cell_backward": gru_cell_backward,
}


def register(lib: torch.library.Library) -> None:
    for name, kernel in KERNELS.items():
        lib.impl(name, kernel, "PrivateUse1")
