"""Every operator in PyTorch's OpInfo database gives the CPU's exact numbers on "tpu".

The bundled device runs each ATen op with the CPU kernel, so a result on "tpu" must be
*bitwise* equal to the CPU's: same dtype, same shape, same bits (NaNs in the same places, the
same sign of zero). Strides are not compared.

``test_op_matches_cpu[OP-DTYPE]``: for every OpInfo entry and each of float32, bfloat16,
float16, int64 and bool that it supports on the CPU, the first ``MAX_SAMPLES`` sample inputs
run on the CPU and on "tpu" with the same seed (so random ops draw the same numbers); the
results and the inputs after the op (in-place changes) are compared.
``test_grad_matches_cpu[OP]``: for every OpInfo entry with autograd support, the float32
outputs and the gradients of the sum of the outputs, first ``GRAD_MAX_SAMPLES`` samples.

Samples whose CPU reference raises are skipped; an op none of whose samples runs on the CPU
is reported as skipped. Ops that return uninitialized memory (``empty``, ``new_empty``...,
flagged ``has_nondeterministic_output`` by OpInfo) are compared on dtype and shape only.

Every mismatch is listed in the tables below as ``xfail(strict=True)``, so a fix shows up as
an XPASS failure and the entry must then be removed: ``KNOWN_DIFFERENCES`` (expected, not a
device bug) and ``DEVICE_BUGS`` (bugs in tpu_lab/device; each group has a minimal repro).

Needs ``expecttest`` (imported by ``torch.testing._internal``).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
import torch
from torch.utils._pytree import tree_flatten, tree_map

import tpu_lab  # noqa: F401  (installs the "tpu" device)

try:
    from torch.testing._internal.common_methods_invocations import op_db
except ModuleNotFoundError as exc:  # pragma: no cover - a missing test dependency
    raise ModuleNotFoundError(
        f"{exc}: torch's OpInfo database needs the {exc.name!r} package (pip install {exc.name})"
    ) from exc

TPU = torch.device("tpu")
DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.bool)
MAX_SAMPLES = 10
GRAD_MAX_SAMPLES = 30  # sample 24 of scaled_dot_product_attention finds a device bug
SEED = 1234

# OpInfo entries about sparse layouts: out of scope. (Samples with sparse tensors, in or
# out, are skipped too; complex and quantized dtypes are not in DTYPES.)
SKIPPED_OPS = frozenset({"sparse.sampled_addmm", "sparse.mm", "to_sparse"})
# Ops whose non-input tensor arguments are CPU tensors on every device (the sample makes them
# with torch.tensor()): only the input moves to "tpu".
HOST_ARGS = frozenset({"tensor_split"})  # tensor_indices_or_sections must be on the CPU


# ---------------------------------------------------------------------------------------
# Expected failures. Keys: "OP" (every dtype) or "OP-DTYPE" for the forward test, "OP" for
# the gradient test; OP is the test id's name (name, or name.variant_test_name).

#: Differences that are expected: not a bug in the device.
KNOWN_DIFFERENCES: dict[str, str] = {
    # linear_cross_entropy's chunked path resolves its "auto" options in Python from
    # input.device.type (torch/nn/modules/linear_cross_entropy_options.py): on "cpu" fp16/bf16
    # inputs accumulate in float32 (acc_policy "accurate"), on any other device in the input
    # dtype ("compact"). Another algorithm on purpose, so other low-precision numbers; float32
    # is unaffected and passes.
    **dict.fromkeys(
        [
            f"nn.functional.linear_cross_entropy.{variant}-{dtype}"
            for variant in ("chunked", "chunked_none")
            for dtype in ("bfloat16", "float16")
        ],
        "linear_cross_entropy's chunked options pick the accumulation dtype by device type",
    ),
}
KNOWN_GRAD_DIFFERENCES: dict[str, str] = {}

#: Ops whose CPU results are themselves not reproducible bit for bit: compared with
#: assert_close's default tolerances instead of bitwise. (Not xfail: they pass or fail at
#: random, so a strict xfail would be flaky.)
CPU_NONDETERMINISTIC: dict[str, str] = {
    # MKL's gelsy (the CPU default driver) gives last-bit differences from run to run for the
    # same 3x3 inputs, depending on where the buffers land in memory: CPU vs CPU differs too.
    "linalg.lstsq": "MKL gelsy: last-bit differences between two CPU runs",
    "linalg.lstsq.grad_oriented": "MKL gelsy: last-bit differences between two CPU runs",
}

#: Bugs in the device (tpu_lab/device) found by the tests, each ``op name: reason with a
#: minimal repro``; a fixed bug shows up as XPASS and must be removed. The first run found
#: six (results of ops that write to an argument, *_scatter on 0-byte C++ storages, the
#: conjugate bit, Python decompositions under grad, SDPA with a mask that requires grad,
#: non-blocking copies to the CPU); all are fixed and covered by the tests below.
DEVICE_BUGS: dict[str, str] = {}
DEVICE_GRAD_BUGS: dict[str, str] = {}


# ---------------------------------------------------------------------------------------
# Moving samples to "tpu" and comparing results.


def _op_id(op) -> str:
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _to_tpu_tensor(x: torch.Tensor) -> torch.Tensor:
    """``x`` on "tpu" with the same sizes, strides and storage offset (also for views)."""
    x = x.detach()
    numel = x.untyped_storage().nbytes() // x.element_size()
    base = x.new_empty(0).set_(x.untyped_storage(), 0, (numel,), (1,))
    return base.to(TPU).as_strided(x.size(), x.stride(), x.storage_offset())


def _to_tpu(tree, requires_grad: bool = False, host_args: bool = False):
    """A sample ``(input, args, kwargs)`` for "tpu": what named the CPU now names "tpu".

    Tensors are copied (aliasing between them kept), devices and ``"cpu"`` strings become
    "tpu". With ``host_args`` only the input moves. Returns ``None`` if nothing in the sample
    names the CPU (``arange(3)``): such a sample runs on the CPU whatever the device.
    """
    copies: dict[int, torch.Tensor] = {}
    moved = False

    def move(x):
        nonlocal moved
        if isinstance(x, torch.Tensor):
            if id(x) not in copies:
                y = _to_tpu_tensor(x)
                if requires_grad and x.requires_grad:
                    y.requires_grad_(True)
                copies[id(x)] = y
            moved = True
            return copies[id(x)]
        if (isinstance(x, torch.device) and x.type == "cpu") or (isinstance(x, str) and x == "cpu"):
            moved = True
            return TPU
        return x

    def is_leaf(x) -> bool:
        return isinstance(x, torch.Size)  # keep a torch.Size a torch.Size, not a tuple

    input_, args, kwargs = tree
    if host_args:
        result = tree_map(move, input_, is_leaf=is_leaf), args, kwargs
    else:
        result = tree_map(move, tree, is_leaf=is_leaf)
    return result if moved else None


def _tensors(tree) -> list[torch.Tensor]:
    return [x for x in tree_flatten(tree)[0] if isinstance(x, torch.Tensor)]


def _has_sparse(tree) -> bool:
    return any(x.layout != torch.strided for x in _tensors(tree))


def _bits(x: torch.Tensor) -> torch.Tensor:
    if x.is_complex():
        x = torch.view_as_real(x)
    ints = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
    return x.contiguous().view(ints[x.element_size()])


def _assert_tensor_equal(
    actual: torch.Tensor, expected: torch.Tensor, where: str, on_tpu: bool, exact: bool
) -> None:
    if on_tpu and actual.device.type != "tpu":
        raise AssertionError(f"{where}: result is on {actual.device}, expected tpu")
    actual = actual.detach().cpu().resolve_conj().resolve_neg()
    expected = expected.detach().resolve_conj().resolve_neg()
    tolerance = {"rtol": 0, "atol": 0} if exact else {}
    torch.testing.assert_close(
        actual,
        expected,
        equal_nan=True,
        check_stride=False,
        msg=lambda m: f"{where}: {m}",
        **tolerance,
    )
    if exact and (actual.is_floating_point() or actual.is_complex()):
        # assert_close has 0.0 == -0.0; the same CPU kernel gives the same bits.
        nan = torch.isnan(torch.view_as_real(expected) if expected.is_complex() else expected)
        if not bool(((_bits(actual) == _bits(expected)) | nan).all()):
            raise AssertionError(f"{where}: values equal but bits differ (sign of zero?)")


def _assert_same(
    actual,
    expected,
    where: str,
    *,
    on_tpu: bool = True,
    exact: bool = True,
    metadata_only: bool = False,
) -> None:
    """Compare two result trees (tensors, tuples, Python scalars), bitwise unless not exact.

    ``on_tpu``: the tensors of ``actual`` must be "tpu" tensors. ``metadata_only``: compare
    dtypes and shapes, not values.
    """
    a_leaves, a_spec = tree_flatten(actual)
    e_leaves, e_spec = tree_flatten(expected)
    if a_spec != e_spec:
        raise AssertionError(f"{where}: result structure {a_spec} != CPU's {e_spec}")
    for i, (a, e) in enumerate(zip(a_leaves, e_leaves, strict=True)):
        at = f"{where}[{i}]"
        if isinstance(e, torch.Tensor):
            if not isinstance(a, torch.Tensor):
                raise AssertionError(f"{at}: got {type(a).__name__}, CPU gave a tensor")
            if metadata_only:
                assert (a.dtype, a.shape) == (e.dtype, e.shape), at
                assert a.device.type == "tpu" or not on_tpu, f"{at}: on {a.device}"
            else:
                _assert_tensor_equal(a, e, at, on_tpu, exact)
        elif isinstance(e, float) and isinstance(a, float) and math.isnan(e):
            assert math.isnan(a), f"{at}: {a} != CPU's nan"
        else:
            assert type(a) is type(e) and a == e, f"{at}: {a!r} != CPU's {e!r}"


# ---------------------------------------------------------------------------------------
# Running one op.


def _samples(op, dtype: torch.dtype, requires_grad: bool, limit: int) -> Iterator:
    torch.manual_seed(SEED)  # sample inputs are random: the same ones every run
    samples = op.sample_inputs("cpu", dtype, requires_grad=requires_grad)
    return itertools.islice(samples, limit)


def _call(fn: Callable, input_, args, kwargs):
    torch.manual_seed(SEED)  # random ops draw the same numbers on both devices
    return fn(input_, *args, **kwargs)


@contextmanager
def _described(index: int, sample) -> Iterator[None]:
    """Name the sample in any error from the "tpu" run or the comparison."""
    try:
        yield
    except Exception as exc:
        raise AssertionError(f"sample {index}: {type(exc).__name__}: {exc}\n{sample}") from exc


def _check_forward(op, dtype: torch.dtype) -> None:
    exact = _op_id(op) not in CPU_NONDETERMINISTIC
    checked = 0
    for i, sample in enumerate(_samples(op, dtype, False, MAX_SAMPLES)):
        tree = (sample.input, sample.args, sample.kwargs)
        if _has_sparse(tree):
            continue
        # Copy to "tpu" first: the CPU run may change the sample's tensors in place.
        on_tpu = _to_tpu(tree, host_args=op.name in HOST_ARGS)
        if on_tpu is None:
            continue
        try:
            expected = _call(op, *tree)
        except Exception:
            continue  # the CPU reference rejects this sample: nothing to compare
        if _has_sparse(expected):
            continue
        with _described(i, sample):
            actual = _call(op, *on_tpu)
            _assert_same(
                actual,
                expected,
                "result",
                exact=exact,
                metadata_only=op.has_nondeterministic_output,
            )
            _assert_same(_tensors(on_tpu), _tensors(tree), "input after the op", on_tpu=False)
        checked += 1
    if not checked:
        pytest.skip("no sample to compare: the CPU rejects them all, or none uses a tensor")


def _differentiable(tree) -> list[torch.Tensor]:
    return [x for x in _tensors(tree) if x.requires_grad and x.is_floating_point()]


def _loss(out) -> torch.Tensor | None:
    """The sum of every output that requires grad (complex ones as real and imaginary)."""
    terms = [
        (torch.view_as_real(x.resolve_conj()) if x.is_complex() else x).sum()
        for x in _tensors(out)
        if x.requires_grad
    ]
    return sum(terms[1:], terms[0]) if terms else None


def _grads(op, sample, tree):
    inputs = _differentiable(tree)
    out = sample.output_process_fn_grad(_call(op, *tree))
    loss = _loss(out)
    if loss is None or not inputs:
        return out, None
    return out, torch.autograd.grad(loss, inputs, allow_unused=True)


def _check_grad(op) -> None:
    exact = _op_id(op) not in CPU_NONDETERMINISTIC
    checked = 0
    for i, sample in enumerate(_samples(op, torch.float32, True, GRAD_MAX_SAMPLES)):
        tree = (sample.input, sample.args, sample.kwargs)
        if _has_sparse(tree):
            continue
        on_tpu = _to_tpu(tree, requires_grad=True, host_args=op.name in HOST_ARGS)
        if on_tpu is None:
            continue
        try:
            expected, expected_grads = _grads(op, sample, tree)
        except Exception:
            continue  # the CPU reference rejects this sample
        if expected_grads is None or _has_sparse(expected):
            continue
        with _described(i, sample):
            actual, actual_grads = _grads(op, sample, on_tpu)
            metadata_only = op.has_nondeterministic_output
            _assert_same(actual, expected, "result", exact=exact, metadata_only=metadata_only)
            _assert_same(list(actual_grads), list(expected_grads), "grad", exact=exact)
        checked += 1
    if not checked:
        pytest.skip("no differentiable sample that the CPU reference accepts")


# ---------------------------------------------------------------------------------------
# The tests.


def _marks(key: str, op_key: str, known: dict[str, str], bugs: dict[str, str]) -> list:
    for table, prefix in ((known, "known difference"), (bugs, "device bug")):
        reason = table.get(key, table.get(op_key))
        if reason is not None:
            return [pytest.mark.xfail(strict=True, reason=f"{prefix}: {reason}")]
    return []


def _forward_cases() -> list:
    cases = []
    for op in op_db:
        if op.name in SKIPPED_OPS:
            continue
        supported = op.supported_dtypes("cpu")
        for dtype in DTYPES:
            if dtype in supported:
                key = f"{_op_id(op)}-{_dtype_name(dtype)}"
                marks = _marks(key, _op_id(op), KNOWN_DIFFERENCES, DEVICE_BUGS)
                cases.append(pytest.param(op, dtype, id=key, marks=marks))
    return cases


def _grad_cases() -> list:
    cases = []
    for op in op_db:
        if op.name in SKIPPED_OPS or not op.supports_autograd:
            continue
        if torch.float32 in op.supported_dtypes("cpu"):
            key = _op_id(op)
            marks = _marks(key, key, KNOWN_GRAD_DIFFERENCES, DEVICE_GRAD_BUGS)
            cases.append(pytest.param(op, id=key, marks=marks))
    return cases


@pytest.mark.parametrize(("op", "dtype"), _forward_cases())
def test_op_matches_cpu(op, dtype):
    _check_forward(op, dtype)


@pytest.mark.parametrize("op", _grad_cases())
def test_grad_matches_cpu(op):
    _check_grad(op)
