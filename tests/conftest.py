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
def use_lowering():
    """``use_lowering("aten")``: "tpu" graphs compiled for the rest of the test run that way
    (``aten``: the ATen graph as is, instant; ``inductor``: Inductor's CPU code, the default)."""
    import contextlib

    from tpu_lab.device.compile_backend import lowering

    with contextlib.ExitStack() as stack:
        yield lambda name: stack.enter_context(lowering(name))
