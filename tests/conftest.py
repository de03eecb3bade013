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
