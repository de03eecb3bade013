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


# -- sparse COO tensors: the ops TorchTPU has sparse kernels for -------------------------


def same_sparse(a: torch.Tensor, b: torch.Tensor) -> None:
    """Both sparse, same dimensions and coalesced flag, bitwise equal indices and values."""
    assert a.layout == b.layout == torch.sparse_coo
    assert (a.shape, a.sparse_dim(), a.dense_dim()) == (b.shape, b.sparse_dim(), b.dense_dim())
    assert a.is_coalesced() == b.is_coalesced()
    same(a._indices(), b._indices())
    same(a._values(), b._values())


def sparse_pair(dtype=torch.float64):
    """An uncoalesced sparse tensor (a repeated index, a dense dimension) on the CPU and "tpu"."""
    indices = torch.tensor([[0, 3, 1, 3], [2, 0, 2, 0]])
    values = (torch.arange(8.0).view(4, 2) * 0.7 - 1.3).to(dtype)
    cpu = torch.sparse_coo_tensor(indices, values, (4, 3, 2), check_invariants=True)
    tpu = torch.sparse_coo_tensor(indices, values, (4, 3, 2), device="tpu", check_invariants=True)
    return cpu, tpu


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.complex128])
def test_sparse_construction_and_members_match_the_cpu(dtype):
    cpu, tpu = sparse_pair(dtype)
    assert (tpu.device.type, tpu.layout) == ("tpu", torch.sparse_coo)
    same_sparse(tpu, cpu)
    assert tpu._nnz() == cpu._nnz() == 4
    same(tpu.to_dense(), cpu.to_dense())
    same_sparse(tpu.coalesce(), cpu.coalesce())
    same(tpu.coalesce().indices(), cpu.coalesce().indices())
    same(tpu.coalesce().values(), cpu.coalesce().values())
    assert tpu.coalesce().values().device.type == "tpu"


@pytest.mark.parametrize(
    "op",
    [
        lambda a, b: a + b,
        lambda a, b: a - b,
        lambda a, b: a * b,
        lambda a, b: torch.add(a, b, alpha=2.5),
        lambda a, b: -a,
        lambda a, b: a * 3,
        lambda a, b: a.clone(),
    ],
    ids=["add", "sub", "mul", "add_alpha", "neg", "mul_scalar", "clone"],
)
def test_sparse_arithmetic_matches_the_cpu(op):
    cpu, tpu = sparse_pair()
    other_cpu = torch.sparse_coo_tensor(
        torch.tensor([[3, 2], [0, 1]]), torch.ones(2, 2, dtype=torch.float64), (4, 3, 2),
        check_invariants=True,
    )
    same_sparse(op(tpu, other_cpu.to("tpu")), op(cpu, other_cpu))


def test_sparse_in_place_ops_and_dense_mixes_match_the_cpu():
    cpu, tpu = sparse_pair()
    cpu.add_(cpu.coalesce())
    tpu.add_(tpu.coalesce())
    same_sparse(tpu, cpu)
    dense = torch.arange(24.0, dtype=torch.float64).view(4, 3, 2)
    same(dense.to("tpu") + tpu, dense + cpu)
    cpu.zero_()
    tpu.zero_()
    same_sparse(tpu, cpu)


def test_sparse_tensors_move_between_the_cpu_and_tpu():
    cpu, tpu = sparse_pair()
    same_sparse(tpu.cpu(), cpu)
    assert tpu.cpu().device.type == "cpu"
    same_sparse(cpu.to("tpu"), cpu)
    assert cpu.to("tpu").device.type == "tpu"
    same_sparse(tpu.to(torch.float32), cpu.to(torch.float32))
    dense = torch.tensor([[0.0, 1.5], [2.0, 0.0]])
    same_sparse(dense.to("tpu").to_sparse(), dense.to_sparse())


def test_sparse_gradients_accumulate_as_on_the_cpu():
    class Fixed(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, grad):
            ctx.save_for_backward(grad)
            return x

        @staticmethod
        def backward(ctx, grad_out):
            return ctx.saved_tensors[0], None

    grads = []
    for device in ("cpu", "tpu"):
        sparse, _ = sparse_pair()
        sparse = sparse.to(device)
        dense = torch.linspace(-1, 1, 24, dtype=torch.float64).view(4, 3, 2).to(device)
        x = torch.zeros(4, 3, 2, dtype=torch.float64, device=device, requires_grad=True)
        (Fixed.apply(x, sparse) + Fixed.apply(x, dense) + Fixed.apply(x, sparse)).sum().backward()
        grads.append(x.grad)
    same(grads[1], grads[0])


def test_sparse_ops_torchtpu_has_no_kernel_for_are_refused_as_there():
    _, tpu = sparse_pair()
    with pytest.raises(NotImplementedError) as raised:
        tpu.sparse_mask(tpu)
    assert str(raised.value).startswith(
        "aten::sparse_mask(): sparse operators are not supported on TPU yet: TorchTPU's sparse "
        "COO tensors have construction, coalescing, add, sub, mul, neg, clone, copies, zero_ and "
        "to_dense only. Densify first (.to_dense()) or run it on the CPU (.cpu())."
    )


# -- two kernels TorchTPU has of its own (scripts/read_torchtpu_kernels.py reads them) ------


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
@pytest.mark.parametrize("antialias", [False, True])
def test_uint8_bilinear_and_bicubic_run_as_on_the_cpu(mode, antialias):
    # TorchTPU's CheckUpsampleDtypes refuses Int, Long and Bool only: uint8 reaches its kernel.
    x = torch.randint(0, 256, (1, 3, 32, 32), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    cpu = torch.nn.functional.interpolate(x, (12, 12), mode=mode, antialias=antialias)
    same(torch.nn.functional.interpolate(x.to("tpu"), (12, 12), mode=mode, antialias=antialias), cpu)


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.bool, torch.int8, torch.int16])
def test_the_dtypes_torchtpu_refuses_for_interpolation_are_refused(mode, dtype):
    # int32, int64 and bool as TorchTPU refuses them; int8 and int16 pass TorchTPU's check, but
    # what its kernel makes of them is not known, so the device keeps the CPU's refusal.
    x = torch.ones(1, 3, 8, 8, dtype=dtype, device="tpu")
    with pytest.raises(RuntimeError, match="not implemented for"):
        torch.nn.functional.interpolate(x, (4, 4), mode=mode)


def torchtpu_softmax(scores: torch.Tensor) -> torch.Tensor:
    """Softmax as TorchTPU's BuildSoftmaxShlo builds it: max with the minimum finite value as
    its initial value, exp of the difference, sum, divide; no guard for a row of -inf."""
    start = torch.tensor(torch.finfo(scores.dtype).min, dtype=scores.dtype)
    top = torch.maximum(scores.amax(-1, keepdim=True), start)
    e = torch.exp(scores - top)
    return e / e.sum(-1, keepdim=True)


def test_a_fully_masked_row_of_the_fused_encoder_layer_is_nan_as_torchtpu_computes_it(monkeypatch):
    layer = torch.nn.TransformerEncoderLayer(4, 2, 16, 0.0, batch_first=True, device="tpu").eval()
    masks = []
    fused = torch._transformer_encoder_layer_fwd

    def record(*args):
        masks.append(args[-2])
        return fused(*args)

    monkeypatch.setattr(torch, "_transformer_encoder_layer_fwd", record)
    x = torch.tensor([[[20.0, 30.0, 40.0, 50.0]]], device="tpu")
    with torch.no_grad():
        out = layer(x, src_key_padding_mask=torch.tensor([[True]], device="tpu"))
    # The fast path ran on "tpu" (PyTorch allows it on the PrivateUse1 device), with the mask
    # F._canonical_mask made: floating, -inf where masked, which TorchTPU adds to the scores.
    (mask,) = masks
    assert mask.device.type == "tpu" and mask.dtype == torch.float32
    assert mask.cpu().tolist() == [[float("-inf")]]
    assert torch.isnan(torchtpu_softmax(torch.tensor([[0.5]]) + mask.cpu())).all()
    assert torch.isnan(out.cpu()).all()
    with torch.no_grad():
        cpu = layer.cpu()(x.cpu(), src_key_padding_mask=torch.tensor([[True]]))
    assert torch.isnan(cpu).all()
