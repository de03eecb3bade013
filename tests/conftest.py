"""Fixtures shared by the test modules."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True, scope="session")
def terminal_of_100_columns():
    """The text views lay themselves out for the terminal (``COLUMNS``, else 100 where output is
    no terminal); the tests read them at 100 columns, whatever terminal runs pytest."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("COLUMNS", "100")
        yield


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


@pytest.fixture(scope="session")
def docs_site(tmp_path_factory):
    """The documentation site of this checkout, built once per test run as ``make docs`` builds
    it (strict): (the build's CompletedProcess, the site's folder)."""
    pytest.importorskip("sphinx", reason="sphinx is missing: pip install 'tpu-lab[docs]'")
    from _docs import ROOT, build

    site = tmp_path_factory.mktemp("site")
    return build(ROOT, site), site
