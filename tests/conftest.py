"""Fixtures shared by the test modules."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture
def fresh_dynamo():
    """No compiled graphs or Dynamo counters from earlier tests, before and after."""
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    yield
    torch._dynamo.reset()


@pytest.fixture
def python_core():
    """Skip the test unless the pure-Python core runs: it tests that core's internals
    (``make test`` runs the device suites once more with ``TPU_LAB_CORE=python``)."""
    from tpu_lab import device

    device.install()
    if device.CORE.name != "python":
        pytest.skip("tests the pure-Python core's kernels (TPU_LAB_CORE=python)")


@pytest.fixture
def compiled_core():
    """Skip the test unless the compiled core runs: pinned memory and storage resize come from
    its C++ hooks, which the pure-Python core cannot provide."""
    from tpu_lab import device

    device.install()
    if device.CORE.name != "compiled":
        pytest.skip("needs the compiled core's hooks (tpu-lab build-core)")


@pytest.fixture
def use_lowering():
    """``use_lowering("aten")``: "tpu" graphs compiled for the rest of the test run that way
    (``aten``: the ATen graph as is, instant; ``inductor``: Inductor's CPU code, the default)."""
    import contextlib

    from tpu_lab.device.compile_backend import lowering

    with contextlib.ExitStack() as stack:
        yield lambda name: stack.enter_context(lowering(name))
