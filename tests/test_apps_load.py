"""The Gradio demo under 16 concurrent clients x 5 requests (benchmarks/bench_demo_load.py):
every request answered with exactly the picture the same request gives when run directly, one
request on the device at a time, and the chip's HBM back to its baseline afterwards."""

import importlib.util
import sys
from pathlib import Path

import pytest

pytest.importorskip("gradio")
pytest.importorskip("gradio_client")

_path = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_demo_load.py"
_spec = importlib.util.spec_from_file_location("bench_demo_load", _path)
bench = importlib.util.module_from_spec(_spec)
sys.modules["bench_demo_load"] = bench  # dataclasses look their module up
_spec.loader.exec_module(bench)


def test_sixteen_clients_five_requests_each():
    result = bench.load(clients=16, requests_each=5)
    assert result.errors == []
    assert result.wrong == []
    assert result.answered == 80
    assert len(result.served) == 80
    assert result.overlapping == 0
    assert result.hbm_after == result.hbm_before
