"""What PyTorch's device-generic tests found on "tpu" (issue 42), each behaviour checked here
without PyTorch's test files: CI has no copy of them (``scripts/run_device_tests.py`` runs
them, docs/compatibility/pytorch-device-tests.md has the run).

Each test compares with the CPU's results (bitwise) or with what CUDA does where the CPU has no
second device: an ``out=`` tensor on another device is refused, CPU scalars are accepted as
inputs only.
"""

from __future__ import annotations

import pytest
import torch

import tpu_lab  # noqa: F401  (installs the "tpu" device)

MIXED = (
    "Expected all tensors to be on the same device, but found at least two devices, tpu:0 and "
    "cpu! Move the CPU tensor with .to('tpu') (or the 'tpu' one with .cpu())."
)
QUANTIZED = (
    "quantized tensors cannot be on the 'tpu' device ({op} made one): TorchTPU has no quantized "
    "kernels. Quantize on the CPU (x.cpu()), or keep integer weights in an int8 tensor with a "
    "float scale on 'tpu'."
)


def same(a: torch.Tensor, b: torch.Tensor) -> None:
    """Bitwise equal: dtype, shape and bytes."""
    a, b = a.cpu(), b.cpu()
    assert (a.dtype, a.shape) == (b.dtype, b.shape)
    assert torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))


# -- out= on another device ---------------------------------------------------------------


def test_nonzero_refuses_a_0_dim_cpu_out():
    t = torch.tensor([[0, 1], [2, 0]], device="tpu")
    out = torch.empty([], dtype=torch.long)
    with pytest.raises(RuntimeError) as raised:
        torch.nonzero(t, out=out)
    assert str(raised.value).startswith(MIXED)
    assert out.shape == ()  # untouched


@pytest.mark.parametrize("shape", [(), (0,), (3, 2)])
def test_written_cpu_tensors_of_any_size_are_refused(shape):
    x = torch.arange(6.0, device="tpu").view(3, 2)
    with pytest.raises(RuntimeError, match="on the same device"):
        torch.add(x, 1, out=torch.empty(shape))


def test_a_0_dim_cpu_tensor_is_still_accepted_as_an_input():
    x = torch.arange(6.0).view(3, 2)
    scalar = torch.tensor(2.5)
    same(torch.mul(x.to("tpu"), scalar), torch.mul(x, scalar))


def test_nonzero_out_on_tpu_matches_the_cpu():
    t = torch.tensor([[0, 1], [2, 0], [3, 3]])
    cpu, tpu = torch.empty([], dtype=torch.long), torch.empty([], dtype=torch.long, device="tpu")
    with pytest.warns(UserWarning, match="resized"):
        torch.nonzero(t, out=cpu)
    with pytest.warns(UserWarning, match="resized"):
        torch.nonzero(t.to("tpu"), out=tpu)
    same(tpu, cpu)


# -- torch.mode with out= -----------------------------------------------------------------


@pytest.mark.parametrize("keepdim", [False, True])
def test_mode_out_matches_the_cpu(keepdim):
    x = torch.tensor([[1.0, 2, 2, 5], [3, 3, 1, 1], [0, 7, 7, 7]])
    values, indices = torch.empty(0), torch.empty(0, dtype=torch.long)
    torch.mode(x, 1, keepdim, out=(values, indices))
    v_tpu = torch.empty(0, device="tpu")
    i_tpu = torch.empty(0, dtype=torch.long, device="tpu")
    got = torch.mode(x.to("tpu"), 1, keepdim, out=(v_tpu, i_tpu))
    same(v_tpu, values)
    same(i_tpu, indices)
    assert got.values is v_tpu and got.indices is i_tpu


def test_mode_out_refuses_cpu_outputs():
    x = torch.tensor([[1.0, 2, 2]], device="tpu")
    with pytest.raises(RuntimeError, match="on the same device"):
        torch.mode(x, 1, out=(torch.empty(0), torch.empty(0, dtype=torch.long)))


# -- quantized tensors --------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore:torch.quantize_per_tensor")
def test_quantizing_a_tpu_tensor_says_torchtpu_has_no_quantized_kernels():
    x = torch.tensor([1.0, 2.0], device="tpu")
    with pytest.raises(NotImplementedError) as raised:
        torch.quantize_per_tensor(x, 0.1, 5, torch.qint8)
    assert str(raised.value).startswith(QUANTIZED.format(op="quantize_per_tensor"))


@pytest.mark.parametrize(
    ("op", "make"),
    [
        (
            "_empty_affine_quantized",
            lambda: torch._empty_affine_quantized(
                [2], scale=0.1, zero_point=0, dtype=torch.qint8, device="tpu"
            ),
        ),
        (
            "empty_quantized",
            lambda: torch.quantize_per_tensor(torch.ones(2), 0.1, 0, torch.qint8).to("tpu"),
        ),
    ],
)
@pytest.mark.filterwarnings("ignore:torch.quantize_per_tensor")
def test_quantized_factories_and_moves_to_tpu_are_refused(op, make):
    with pytest.raises(NotImplementedError) as raised:
        make()
    assert str(raised.value).startswith(QUANTIZED.format(op=op))


@pytest.mark.filterwarnings("ignore:torch.quantize_per_tensor")
def test_quantized_cpu_tensors_are_untouched():
    q = torch.quantize_per_tensor(torch.tensor([1.0, 2.0, 3.0]), 0.1, 5, torch.quint8)
    assert torch.equal(q.flip(0).int_repr(), torch.tensor([35, 25, 15], dtype=torch.uint8))


# -- index_fill with a CPU index ----------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bfloat16])
@pytest.mark.parametrize("dim", [0, 1])
def test_index_fill_takes_a_cpu_index(dtype, dim):
    x = (torch.arange(12.0).view(3, 4) * 1.5).to(dtype)
    index = torch.tensor([2, 0])
    value = torch.tensor(-3, dtype=dtype)
    same(x.to("tpu").index_fill(dim, index, 7), x.index_fill(dim, index, 7))
    same(x.to("tpu").index_fill(dim, index, value), x.index_fill(dim, index, value))
    inplace = x.to("tpu")
    inplace.index_fill_(dim, index, 5)
    same(inplace, x.clone().index_fill_(dim, index, 5))


def test_index_fill_of_a_cpu_tensor_with_a_tpu_index_is_refused():
    with pytest.raises(RuntimeError) as raised:
        torch.zeros(3).index_fill(0, torch.tensor([1], device="tpu"), 5.0)
    assert str(raised.value).startswith(MIXED)


def test_other_index_ops_still_refuse_cpu_indices():
    x = torch.arange(6.0, device="tpu")
    with pytest.raises(RuntimeError, match="on the same device"):
        x.index_select(0, torch.tensor([1, 2]))
