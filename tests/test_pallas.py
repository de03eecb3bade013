"""Pallas kernels as PyTorch ops on the bundled device (``torch.tpu.pallas.jax_op``): run by
JAX's Pallas interpreter on the CPU, equal to the same kernel run in JAX with interpret=True."""

from __future__ import annotations

import functools

import pytest
import torch

import tpu_lab  # noqa: F401  (the "tpu" device)
from tpu_lab.errors import NotSimulatedError

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
pl = pytest.importorskip("jax.experimental.pallas")
from tpu_lab.device.pallas import jax_op  # noqa: E402


def add_kernel(x_ref, y_ref, o_ref):
    o_ref[...] = x_ref[...] + y_ref[...]


def add(x: jax.Array, y: jax.Array) -> jax.Array:
    return pl.pallas_call(add_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x, y)


def matmul_kernel(x_ref, y_ref, o_ref, *, scale):
    o_ref[...] = scale * jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32)


def matmul(x: jax.Array, y: jax.Array, scale: float, interpret: bool = False) -> jax.Array:
    m, n, bm, bn = x.shape[0], y.shape[1], 64, 128
    return pl.pallas_call(
        functools.partial(matmul_kernel, scale=scale),
        out_shape=jax.ShapeDtypeStruct((m, n), jnp.float32),
        grid=(m // bm, n // bn),
        in_specs=[pl.BlockSpec((bm, x.shape[1]), lambda i, j: (i, 0)),
                  pl.BlockSpec((y.shape[0], bn), lambda i, j: (0, j))],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j: (i, j)),
        interpret=interpret,
    )(x, y)  # fmt: skip


def _jax(t: torch.Tensor):
    return jnp.asarray(t.cpu().numpy())


ADD = jax_op("tpu_lab_test::add", add)


def test_a_pallas_kernel_runs_on_tpu_tensors_and_equals_jax():
    x = torch.arange(8.0).reshape(8, 1).repeat(1, 128).to("tpu")
    y = torch.full((8, 128), 0.5, device="tpu")
    out = ADD(x, y)
    assert out.device.type == "tpu" and out.dtype == torch.float32
    ref = pl.pallas_call(add_kernel, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
                         interpret=True)(_jax(x), _jax(y))  # fmt: skip
    assert (out.cpu().numpy() == ref).all()
    assert torch.equal(out.cpu(), x.cpu() + y.cpu())


def test_a_tiled_matmul_with_a_grid_block_specs_and_a_static_scale():
    op = jax_op("tpu_lab_test::matmul", matmul)
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(128, 96, generator=g), torch.randn(96, 256, generator=g)
    out = op(x.to("tpu"), y.to("tpu"), 0.5)
    ref = jax.jit(matmul, static_argnums=(2, 3))(_jax(x), _jax(y), 0.5, True)
    assert (out.cpu().numpy() == ref).all()  # bitwise the JAX interpreter's result
    torch.testing.assert_close(out.cpu(), 0.5 * x @ y, rtol=1e-5, atol=1e-4)


def test_bfloat16_inputs_and_a_tuple_of_results_with_the_decorator_form():
    @jax_op("tpu_lab_test::split")
    def split(x: jax.Array) -> tuple[jax.Array, jax.Array]:
        return x * 2, (x + 1).astype(jnp.float32)

    x = torch.tensor([[1.5, -2.0]], dtype=torch.bfloat16, device="tpu")
    twice, plus_one = split(x)
    assert twice.dtype == torch.bfloat16 and plus_one.dtype == torch.float32
    assert twice.cpu().tolist() == [[3.0, -4.0]] and plus_one.cpu().tolist() == [[2.5, -1.0]]


def test_registration_errors_say_what_to_change():
    with pytest.raises(ValueError, match="does not contain a namespace"):
        jax_op("add", add)
    with pytest.raises(TypeError, match="parameter 'x' of f needs an annotation"):

        def f(x):
            return x

        jax_op("tpu_lab_test::f", f)
    with pytest.raises(NotSimulatedError, match="with a mesh"):
        jax_op("tpu_lab_test::g", add, mesh=object())


def test_torch_tpu_pallas_is_this_jax_op():
    assert torch.tpu.pallas.jax_op is jax_op
    assert sorted(n for n in dir(torch.tpu.pallas) if not n.startswith("_")) == [
        "get_pallas_mesh", "jax_op"]  # fmt: skip
    with pytest.raises(NotSimulatedError, match="get_pallas_mesh maps torch ranks"):
        torch.tpu.pallas.get_pallas_mesh("x")
