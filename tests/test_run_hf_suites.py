"""scripts/run_hf_suites.py: how it assembles what a checkout of Transformers' tests lacks.

The suites themselves are other people's code and run only by hand (see the script and
docs/hf-suites-generation.md); these tests cover the script's own decisions: which names it
gives ``transformers.testing_utils``, which helper module it stands in for and how that skips,
whether the checkout's generation mixin is real, and which tests ``--generation-only`` keeps.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def runner():
    spec = importlib.util.spec_from_file_location(
        "run_hf_suites", ROOT / "scripts" / "run_hf_suites.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(spec.name, None)


def test_supply_testing_utils_adds_only_missing_literal_constants(runner, tmp_path):
    from transformers import testing_utils

    original = testing_utils.SMALL_MODEL_IDENTIFIER
    path = tmp_path / "testing_utils.py"
    path.write_text(
        "_HF_SUITES_DEFAULTS = {'batch_size': 13, 'seq_length': 7}\n"
        "SMALL_MODEL_IDENTIFIER = 'someone/else'\n"
        "_HF_SUITES_COMPUTED = dict(a=1)\n"
    )
    try:
        assert runner.supply_testing_utils(path) == ["_HF_SUITES_DEFAULTS"]
        assert testing_utils._HF_SUITES_DEFAULTS == {"batch_size": 13, "seq_length": 7}
        assert vars(testing_utils)["SMALL_MODEL_IDENTIFIER"] == original
        assert not hasattr(testing_utils, "_HF_SUITES_COMPUTED")
    finally:
        vars(testing_utils).pop("_HF_SUITES_DEFAULTS", None)


def test_missing_helper_is_stood_in_by_a_module_that_skips_its_caller(runner, tmp_path):
    name = "tests.distributed_testing_utils"
    saved = sys.modules.pop(name, None)
    try:
        assert runner.stand_in_missing_helpers(tmp_path) == [name]
        from tests.distributed_testing_utils import _get_rank_device, run_distributed

        with pytest.raises(pytest.skip.Exception, match="multi-process test not run"):
            run_distributed(world_size=2)
        with pytest.raises(pytest.skip.Exception, match="neither the sdist nor"):
            _get_rank_device(0)
        assert not hasattr(sys.modules[name], "__path__")
    finally:
        sys.modules.pop(name, None)
        if saved is not None:
            sys.modules[name] = saved


def test_a_helper_the_checkout_has_is_not_stood_in(runner, tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "distributed_testing_utils.py").write_text("")
    before = sys.modules.get("tests.distributed_testing_utils")
    assert runner.stand_in_missing_helpers(tmp_path) == []
    assert sys.modules.get("tests.distributed_testing_utils") is before


def test_generation_mixin_tests_tells_the_real_mixin_from_a_stand_in(runner, tmp_path):
    path = tmp_path / "tests" / "generation" / "test_utils.py"
    assert runner.generation_mixin_tests(tmp_path) == []
    path.parent.mkdir(parents=True)
    path.write_text("class GenerationTesterMixin:\n    pass\n")
    assert runner.generation_mixin_tests(tmp_path) == []
    path.write_text(
        "class GenerationTesterMixin:\n"
        "    def _helper(self):\n        pass\n\n"
        "    def test_greedy_generate(self):\n        pass\n\n"
        "    def test_beam_search_generate(self):\n        pass\n"
    )
    assert runner.generation_mixin_tests(tmp_path) == [
        "test_greedy_generate",
        "test_beam_search_generate",
    ]


def test_only_named_keeps_parameterized_cases_but_not_longer_names(runner):
    names = [
        "test_greedy_generate",
        "test_greedy_generate_0_foo",
        "test_greedy_generate_12",
        "test_greedy_generate_dict_outputs",
        "test_model",
    ]
    items = [SimpleNamespace(name=n) for n in names]
    keep, drop = runner.only_named(items, ["test_greedy_generate"])
    assert [i.name for i in keep] == names[:3]
    assert [i.name for i in drop] == names[3:]
