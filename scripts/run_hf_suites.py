"""Run Hugging Face's own model tests on the CPU and on the bundled "tpu" device, and compare.

    python scripts/run_hf_suites.py --diffusers PATH --transformers PATH [--testing-utils FILE]
                                    [--generation-only] [--only NAME ...]
                                    [--per-class N] [-k EXPR] [--timeout S] [--jobs 2] [--out DIR]

PATH is a checkout of the library's repository that is *not* part of this one (its test files
are other people's code): ``--diffusers`` needs ``PATH/tests`` of a diffusers checkout,
``--transformers`` a ``PATH/tests`` of transformers, with ``PATH/src/transformers`` (a link to
the installed package will do). docs/hf-suites-generation.md says how the Transformers checkout
is assembled: the common mixins from the sdist of the installed version; the generation mixin
(``tests/generation/test_utils.py``), ``tests/causal_lm_tester.py``, ``tests/exporters`` and the
model test files from one commit of the repository. The script prints how many tests the
checkout's ``GenerationTesterMixin`` defines (none: a stand-in, ``generate()`` goes untested);
``--generation-only`` keeps just those tests. Two things a checkout of that kind lacks are
given in the pytest process, and each run's line says so:

- ``--testing-utils FILE``: the library's ``testing_utils.py`` at the tests' commit; the literal
  constants it has and the installed ``transformers.testing_utils`` lacks are set there
  (``_TEXT_MODEL_TESTER_DEFAULTS``, which 5.25.0 dropped and the commit's causal-LM tester
  imports); nothing the installed library defines is replaced;
- ``tests/distributed_testing_utils.py``, which the sdist's FSDP and tensor-parallel mixins
  import and which neither the sdist nor any stored version holds: when missing, a module
  stands in whose every function skips its caller (those are multi-process tests).

The suites also need the test-only package ``parameterized``; ``--pythonpath DIR`` adds a
directory that holds it.

Each suite of the selection below runs twice with pytest, in a fresh subprocess each, with the
Hub offline (``HF_HUB_OFFLINE=1``): once with the suite's test device set to "cpu", once to
"tpu". Nothing imports tpu_lab: PyTorch's device-backend autoload (the ``torch.backends`` entry
point) makes "tpu" the bundled device at ``import torch``, exactly as TorchTPU loads. How each
library is told the device:

- diffusers: ``DIFFUSERS_TEST_DEVICE`` plus, for "tpu", ``DIFFUSERS_TEST_DEVICE_SPEC``: a spec
  file (written by this script) mapping its backend functions (seed, device count, memory
  statistics, empty cache) to ``torch.tpu`` / ``torch.accelerator``, as diffusers documents for
  a device it does not know;
- transformers: ``TRANSFORMERS_TEST_DEVICE`` (its testing_utils already map "tpu" to
  ``torch.tpu.manual_seed`` and ``torch.accelerator.*``). Without it transformers would pick
  "tpu" on its own once the device is registered, so the CPU run sets "cpu" explicitly.

The results come from pytest's junit xml (a small plugin, this module loaded with ``-p``, also
logs each outcome as it happens so that a run stopped by its timeout still counts). The table
gives passed/failed/skipped per suite and device, then every test whose outcome differs, with
the failure's first line or the skip's reason.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Suite:
    name: str
    files: tuple[str, ...]
    deselect: tuple[str, ...] = ()  # node ids (relative to the checkout) left out on both devices
    why: str = ""  # what is left out and why


SELECTION: dict[str, list[Suite]] = {
    "diffusers": [
        Suite("UNet2D", ("tests/models/unets/test_models_unet_2d.py",)),
        Suite(
            "UNet2DCondition",
            ("tests/models/unets/test_models_unet_2d_condition.py",),
        ),
        Suite(
            "DiT",
            (
                "tests/models/transformers/test_models_dit_transformer2d.py",
                "tests/pipelines/dit/test_dit.py",
            ),
        ),
        Suite("Flux", ("tests/models/transformers/test_models_transformer_flux.py",)),
        Suite(
            "AutoencoderKL",
            ("tests/models/autoencoders/test_models_autoencoder_kl.py",),
        ),
        Suite(
            "Wan",
            (
                "tests/models/transformers/test_models_transformer_wan.py",
                "tests/models/autoencoders/test_models_autoencoder_wan.py",
            ),
        ),
        Suite("DDIM pipeline", ("tests/pipelines/ddim/test_ddim.py",)),
        Suite("DDPM pipeline", ("tests/pipelines/ddpm/test_ddpm.py",)),
        Suite("group offloading (hooks)", ("tests/hooks/test_group_offloading.py",)),
    ],
    "transformers": [
        Suite("Llama", ("tests/models/llama/test_modeling_llama.py",)),
        Suite("GPT-2", ("tests/models/gpt2/test_modeling_gpt2.py",)),
        Suite("BERT", ("tests/models/bert/test_modeling_bert.py",)),
        Suite("Qwen2", ("tests/models/qwen2/test_modeling_qwen2.py",)),
        Suite("T5", ("tests/models/t5/test_modeling_t5.py",)),
    ],
}

#: diffusers' device spec for "tpu" (DIFFUSERS_TEST_DEVICE_SPEC): the module must be importable
#: by its file name from the working directory, so it is written there.
_DIFFUSERS_SPEC = """\
import torch

DEVICE_NAME = "tpu"
MANUAL_SEED_FN = torch.tpu.manual_seed
DEVICE_COUNT_FN = torch.accelerator.device_count
EMPTY_CACHE_FN = torch.accelerator.empty_cache
RESET_PEAK_MEMORY_STATS_FN = torch.accelerator.reset_peak_memory_stats
RESET_MAX_MEMORY_ALLOCATED_FN = torch.accelerator.reset_peak_memory_stats
MAX_MEMORY_ALLOCATED_FN = torch.accelerator.max_memory_allocated
SUPPORTS_TRAINING = True
"""
_SPEC_NAME = "tpu_lab_diffusers_device_spec.py"


# --------------------------------------------------------------------------------------------
# pytest plugin (this module, loaded in the child with `-p run_hf_suites`)


def supply_testing_utils(path: Path) -> list[str]:
    """Give ``transformers.testing_utils`` the names it lacks that the ``testing_utils.py`` at
    ``path`` assigns to a literal, and return them.

    That file is the library's ``testing_utils.py`` at the commit the model test files come
    from: a test file of that commit may import a constant the installed release has since
    moved out of the library (5.25.0 no longer has ``_TEXT_MODEL_TESTER_DEFAULTS``, which that
    commit's ``tests/causal_lm_tester.py`` imports). Nothing the installed library defines is
    replaced, and nothing but literal constants is taken.
    """
    import ast

    from transformers import testing_utils

    supplied = []
    for node in ast.parse(path.read_text()).body:
        if not (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
        ):
            continue
        name = node.targets[0].id
        if hasattr(testing_utils, name):
            continue
        try:
            value = ast.literal_eval(node.value)
        except ValueError:
            continue
        setattr(testing_utils, name, value)
        supplied.append(name)
    return supplied


#: Helper modules that files of the installed version's sdist import but that neither the sdist
#: nor any stored version of the repository holds. When the checkout lacks one, a stand-in is
#: imported instead whose every function skips the test that calls it, with this reason.
MISSING_HELPERS = {
    "tests.distributed_testing_utils": (
        "tests/distributed_testing_utils.py (imported by the sdist's FSDP and tensor-parallel "
        "mixins) is in neither the sdist nor the stored repository: multi-process test not run"
    ),
}


def stand_in_missing_helpers(rootpath: Path) -> list[str]:
    """Register a stand-in for each of ``MISSING_HELPERS`` the checkout at ``rootpath`` lacks."""
    import types

    standing_in = []
    for name, reason in MISSING_HELPERS.items():
        if (rootpath / (name.replace(".", "/") + ".py")).exists():
            continue

        def attribute(attr: str, reason: str = reason):
            if attr.startswith("__"):
                raise AttributeError(attr)

            def skip(*args, **kwargs):
                import pytest

                pytest.skip(reason)

            return skip

        module = types.ModuleType(name, reason)
        module.__getattr__ = attribute
        sys.modules[name] = module
        standing_in.append(name)
    return standing_in


def pytest_configure(config):  # pragma: no cover - runs in the child
    path = os.environ.get("HF_SUITES_TESTING_UTILS")
    if path:
        config._hf_suites_supplied = supply_testing_utils(Path(path))
    if os.environ.get("TRANSFORMERS_TEST_DEVICE"):
        config._hf_suites_standins = stand_in_missing_helpers(config.rootpath)


def pytest_sessionstart(session):  # pragma: no cover - runs in the child
    path = os.environ.get("HF_SUITES_LOG")
    if not path:
        return
    import torch

    info = {"event": "start", "accelerator": str(torch.accelerator.current_accelerator())}
    for key in ("supplied", "standins"):
        value = getattr(session.config, f"_hf_suites_{key}", None)
        if value:
            info[key] = value
    if "tpu_lab" in sys.modules:
        from tpu_lab.device import core

        info["core"] = core.describe()
    else:
        info["core"] = "tpu_lab not loaded"
    with open(path, "a") as f:
        f.write(json.dumps(info) + "\n")


#: Exceptions that mean "this test needs the Hugging Face Hub", which is offline here. Such a
#: test is reported as skipped (on both devices alike) with the reason "needs the Hub".
_HUB_ERRORS = (
    "LocalEntryNotFoundError",
    "OfflineModeIsEnabled",
    "GatedRepoError",
    "RepositoryNotFoundError",
)
_HUB_TEXT = ("huggingface.co", "offline mode", "HF_HUB_OFFLINE", "Hub is offline")


def _needs_hub(excinfo) -> bool:
    exc = excinfo.value
    seen = 0
    while exc is not None and seen < 8:
        if type(exc).__name__ in _HUB_ERRORS or any(t in str(exc) for t in _HUB_TEXT):
            return True
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return False


try:  # the hook needs pytest, present in the child only
    import pytest as _pytest

    @_pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(item, call):  # pragma: no cover - runs in the child
        outcome = yield
        report = outcome.get_result()
        if report.failed and call.excinfo is not None and _needs_hub(call.excinfo):
            report.outcome = "skipped"
            report.longrepr = (
                str(item.path),
                item.location[1] or 0,
                "needs the Hugging Face Hub (offline here)",
            )
except ImportError:  # pragma: no cover
    pass


def only_named(items: list, names: list[str]) -> tuple[list, list]:
    """Split ``items`` into the tests named in ``names`` (a ``parameterized.expand`` case,
    ``name_<i>[_<params>]``, counts as its test) and the rest."""
    named = re.compile("(?:" + "|".join(map(re.escape, names)) + r")(?:_\d+(?:_\w*)?)?")
    keep = [item for item in items if named.fullmatch(item.name)]
    return keep, [item for item in items if not named.fullmatch(item.name)]


def pytest_collection_modifyitems(session, config, items):  # pragma: no cover - in the child
    """``--generation-only``: keep the tests GenerationTesterMixin defines. ``--per-class N``:
    keep the first N tests of each test class (collection order, the same on both devices)
    plus every test whose name matches ``--always``."""
    names = [n for n in (os.environ.get("HF_SUITES_ONLY_TESTS") or "").split(",") if n]
    if names:
        items[:], drop = only_named(items, names)
        if drop:
            config.hook.pytest_deselected(items=drop)
    per_class = int(os.environ.get("HF_SUITES_PER_CLASS") or 0)
    if per_class <= 0:
        return
    always = re.compile(os.environ.get("HF_SUITES_ALWAYS") or r"(?!)")
    seen: dict[str, int] = {}
    keep, drop = [], []
    for item in items:
        cls = item.nodeid.rsplit("::", 1)[0]
        if always.search(item.name):
            keep.append(item)
        elif seen.get(cls, 0) < per_class:
            seen[cls] = seen.get(cls, 0) + 1
            keep.append(item)
        else:
            drop.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_runtest_logreport(report):  # pragma: no cover - runs in the child
    path = os.environ.get("HF_SUITES_LOG")
    if not path:
        return
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        outcome = report.outcome
        if hasattr(report, "wasxfail"):
            outcome = "skipped"
        elif report.when == "setup" and outcome == "failed":
            outcome = "error"
        msg = ""
        if outcome == "skipped" and isinstance(report.longrepr, tuple):
            msg = str(report.longrepr[2])
        elif outcome in ("failed", "error"):
            msg = _first_error_line(str(report.longrepr))
        with open(path, "a") as f:
            f.write(
                json.dumps(
                    {
                        "id": report.nodeid,
                        "outcome": outcome,
                        "message": msg,
                        "s": round(report.duration, 2),
                    }
                )
                + "\n"
            )


# --------------------------------------------------------------------------------------------


def _first_error_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in lines:
        if ln.startswith("E "):
            return ln[2:].strip()[:300]
    return (lines[-1] if lines else "")[:300]


@dataclass
class Run:
    suite: str
    device: str
    results: dict[str, tuple[str, str]] = field(default_factory=dict)  # id -> (outcome, message)
    seconds: float = 0.0
    timed_out: bool = False
    returncode: int | None = None
    core: str = ""
    log: str = ""
    supplied: list[str] = field(default_factory=list)  # what the child gave the checkout

    def count(self, outcome: str) -> int:
        return sum(1 for o, _ in self.results.values() if o == outcome)


def _parse_junit(path: Path) -> dict[str, tuple[str, str]]:
    out: dict[str, tuple[str, str]] = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        module, _, cls = case.get("classname", "").rpartition(".")
        test_id = f"{module.replace('.', '/')}.py::{cls}::{case.get('name')}"
        outcome, msg = "passed", ""
        # A test with subtests (unittest's subTest) can hold several children: any failure or
        # error makes it failed, whatever its skipped subtests; the first failure is reported.
        for child in case:
            if child.tag in ("failure", "error") and outcome not in ("failed", "error"):
                outcome = "failed" if child.tag == "failure" else "error"
                msg = _first_error_line(child.get("message") or child.text or "")
            elif child.tag == "skipped" and outcome == "passed":
                outcome, msg = "skipped", (child.get("message") or "")[:300]
        out[test_id] = (outcome, msg)
    return out


def run_one(
    library: str, checkout: Path, suites: list[Suite], device: str, args, out_dir: Path
) -> Run:
    """One pytest process for every suite of a library on one device (start-up is paid once)."""
    tag = f"{library}-{device}"
    junit = out_dir / f"{tag}.xml"
    log = out_dir / f"{tag}.jsonl"
    stdout = out_dir / f"{tag}.log"
    for p in (junit, log):
        p.unlink(missing_ok=True)
    work = Path(tempfile.mkdtemp(prefix="hf-suite-", dir=out_dir))
    env = dict(os.environ)
    env.update(
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        HF_SUITES_LOG=str(log),
        PYTHONPATH=os.pathsep.join(
            [str(HERE), *args.pythonpath, *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])]
        ),
        HF_SUITES_PER_CLASS=str(args.per_class),
        HF_SUITES_ALWAYS=args.always,
        HF_SUITES_ONLY_TESTS=",".join(args.only_tests if library == "transformers" else []),
        PYTHONDONTWRITEBYTECODE="1",
    )
    env.pop("TORCH_DEVICE_BACKEND_AUTOLOAD", None)
    if library == "diffusers":
        env["DIFFUSERS_TEST_DEVICE"] = device
        env.pop("DIFFUSERS_TEST_DEVICE_SPEC", None)
        if device == "tpu":
            (work / _SPEC_NAME).write_text(_DIFFUSERS_SPEC)
            env["DIFFUSERS_TEST_DEVICE_SPEC"] = _SPEC_NAME
    else:
        env["TRANSFORMERS_TEST_DEVICE"] = device
        env.pop("HF_SUITES_TESTING_UTILS", None)
        if args.testing_utils:
            env["HF_SUITES_TESTING_UTILS"] = str(args.testing_utils.resolve())
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        *[str(checkout / f) for suite in suites for f in suite.files],
        "--rootdir",
        str(checkout),
        "-p",
        "run_hf_suites",
        "-p",
        "no:cacheprovider",
        "--continue-on-collection-errors",
        "-q",
        "--no-header",
        "-rN",
        "--tb=short",
        f"--junitxml={junit}",
        "-o",
        "junit_family=xunit1",
    ]
    if args.k:
        cmd += ["-k", args.k]
    for d in (d for s in suites for d in s.deselect):
        cmd += ["--deselect", str(checkout / d)]
    run = Run(library, device, log=str(stdout))
    t0 = time.monotonic()
    with open(stdout, "w") as fh:
        try:
            proc = subprocess.run(
                cmd, cwd=work, env=env, stdout=fh, stderr=subprocess.STDOUT, timeout=args.timeout
            )
            run.returncode = proc.returncode
        except subprocess.TimeoutExpired:
            run.timed_out = True
    run.seconds = time.monotonic() - t0
    if junit.exists() and not run.timed_out:
        run.results = _parse_junit(junit)
    from_log = not junit.exists() or run.timed_out
    if log.exists():
        for line in log.read_text().splitlines():
            rec = json.loads(line)
            if rec.get("event") == "start":
                run.core = rec.get("core", "")
                run.supplied = rec.get("supplied", []) + [
                    f"{m} (stand-in)" for m in rec.get("standins", [])
                ]
            # subtests log one record each under their test's id: a failure sticks
            elif from_log and run.results.get(rec["id"], ("",))[0] not in ("failed", "error"):
                run.results[rec["id"]] = (rec["outcome"], rec["message"])
    return run


def generation_mixin_tests(checkout: Path) -> list[str]:
    """The tests ``GenerationTesterMixin`` defines in the checkout's
    ``tests/generation/test_utils.py`` (none for a missing file or an empty stand-in)."""
    import ast

    path = checkout / "tests" / "generation" / "test_utils.py"
    if not path.is_file():
        return []
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ClassDef) and node.name == "GenerationTesterMixin":
            return [
                f.name
                for f in node.body
                if isinstance(f, ast.FunctionDef) and f.name.startswith("test_")
            ]
    return []


def compare(cpu: Run, tpu: Run) -> list[tuple[str, str, str, str]]:
    diffs = []
    for test_id in sorted(set(cpu.results) | set(tpu.results)):
        c = cpu.results.get(test_id, ("not run", ""))
        t = tpu.results.get(test_id, ("not run", ""))
        if c[0] != t[0]:
            msg = (
                t[1] if t[0] in ("failed", "error") else c[1] if c[0] == "skipped" else t[1] or c[1]
            )
            diffs.append((test_id, c[0], t[0], msg))
    return diffs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--diffusers", type=Path, help="a diffusers checkout (its tests/ folder is used)"
    )
    ap.add_argument(
        "--transformers", type=Path, help="a transformers checkout (its tests/ folder is used)"
    )
    ap.add_argument("--only", nargs="*", default=[], help="suite names to run (default: all)")
    ap.add_argument("--devices", nargs="*", default=["cpu", "tpu"])
    ap.add_argument("-k", default=None, help="an extra -k expression for every suite")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per suite and device")
    ap.add_argument("--jobs", type=int, default=1, help="suite runs at once (each is one process)")
    ap.add_argument(
        "--pythonpath", action="append", default=[], help="extra import path (parameterized)"
    )
    ap.add_argument(
        "--testing-utils",
        type=Path,
        default=None,
        help="transformers' testing_utils.py at the model test files' commit: constants they "
        "import that the installed version lacks are taken from it",
    )
    ap.add_argument(
        "--generation-only",
        action="store_true",
        help="transformers: run only the tests GenerationTesterMixin defines (by name)",
    )
    ap.add_argument("--list-hub", action="store_true", help="list the tests skipped for the Hub")
    ap.add_argument(
        "--out", type=Path, default=None, help="where logs, junit xml and results.json go"
    )
    ap.add_argument(
        "--per-class", type=int, default=0, help="run the first N tests of each test class (0: all)"
    )
    ap.add_argument(
        "--always",
        default="offload",
        help="regex: tests kept whatever --per-class (default: offload)",
    )
    ap.add_argument(
        "--report", nargs="+", type=Path, help="print the table of saved results.json files"
    )
    args = ap.parse_args(argv)
    if args.report:
        render([e for f in args.report for e in json.loads(f.read_text())], list_hub=args.list_hub)
        return 0
    checkouts = {"diffusers": args.diffusers, "transformers": args.transformers}
    if not any(checkouts.values()):
        ap.error("give --diffusers PATH and/or --transformers PATH")
    for lib, path in checkouts.items():
        if path is not None and not (path / "tests").is_dir():
            ap.error(f"--{lib} {path}: no tests/ folder there")
    args.only_tests = []
    if args.transformers is not None:
        mixin = generation_mixin_tests(args.transformers)
        if args.generation_only:
            if not mixin:
                ap.error("--generation-only: the checkout has no GenerationTesterMixin test")
            args.only_tests = mixin
        print(
            f"transformers: GenerationTesterMixin defines {len(mixin)} tests"
            if mixin
            else "transformers: tests/generation/test_utils.py defines no GenerationTesterMixin "
            "test (missing or a stand-in): generate() is not tested",
            flush=True,
        )
    out_dir = (args.out or Path(tempfile.mkdtemp(prefix="hf-suites-"))).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)

    jobs = []
    for lib, path in checkouts.items():
        if path is None:
            continue
        suites = [s for s in SELECTION[lib] if not args.only or s.name in args.only]
        for device in args.devices:
            jobs.append((lib, path.resolve(), suites, device))
    print(f"{len(jobs)} runs; logs in {out_dir}", flush=True)

    def work(job):
        lib, path, suites, device = job
        r = run_one(lib, path, suites, device, args, out_dir)
        state = "TIMEOUT" if r.timed_out else f"rc={r.returncode}"
        print(
            f"  {lib:12s} {device:4s} {state:8s} {r.seconds:6.0f}s  passed {r.count('passed')} "
            f"failed {r.count('failed') + r.count('error')} skipped {r.count('skipped')}"
            f"  core: {r.core}" + (f"  supplied: {', '.join(r.supplied)}" if r.supplied else ""),
            flush=True,
        )
        return job, r

    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        done = list(pool.map(work, jobs))
    runs = {(lib, device): r for (lib, _, _, device), r in done}

    def part(r: Run | None, suite: Suite) -> Run | None:
        if r is None:
            return None
        sub = Run(suite.name, r.device, timed_out=r.timed_out, core=r.core)
        sub.results = {i: v for i, v in r.results.items() if i.split("::")[0] in suite.files}
        return sub

    def common(cpu: Run | None, tpu: Run | None) -> None:
        # a run stopped by its timeout: compare the tests both devices reached
        if cpu and tpu and (cpu.timed_out or tpu.timed_out):
            both = set(cpu.results) & set(tpu.results)
            for r in (cpu, tpu):
                r.results = {i: v for i, v in r.results.items() if i in both}

    report = []
    for lib, path in checkouts.items():
        if path is None:
            continue
        for suite in SELECTION[lib]:
            if args.only and suite.name not in args.only:
                continue
            cpu, tpu = part(runs.get((lib, "cpu")), suite), part(runs.get((lib, "tpu")), suite)
            common(cpu, tpu)
            report.append(
                {
                    "library": lib,
                    "suite": suite.name,
                    "runs": {
                        d: {"results": r.results, "timed_out": r.timed_out, "core": r.core}
                        for d, r in (("cpu", cpu), ("tpu", tpu))
                        if r is not None
                    },
                }
            )
    (out_dir / "results.json").write_text(json.dumps(report, indent=1))
    render(report, list_hub=args.list_hub)
    print(f"\nresults: {out_dir / 'results.json'}")
    return 0


#: A CPU skip with one of these reasons is the suite's own "needs an accelerator" marker.
_ACCELERATOR_ONLY = re.compile(r"accelerator|GPU|CUDA|cuda|requires_accelerator", re.I)


def render(report: list[dict], list_hub: bool = False) -> None:
    """Print the table and every difference (from run() or from saved results.json files)."""

    def load(entry: dict, device: str) -> Run | None:
        raw = entry["runs"].get(device)
        if raw is None:
            return None
        r = Run(entry["suite"], device, timed_out=raw["timed_out"], core=raw.get("core", ""))
        r.results = {i: tuple(v) for i, v in raw["results"].items()}
        return r

    def counts(r: Run | None) -> str:
        if r is None:
            return "-"
        s = f"{r.count('passed')}/{r.count('failed') + r.count('error')}/{r.count('skipped')}"
        return s + (" (timeout)" if r.timed_out else "")

    cores = sorted({e["runs"]["tpu"]["core"] for e in report if "tpu" in e["runs"]})
    print("\ntpu core: " + "; ".join(cores))
    print(
        "\n| library | suite | CPU passed/failed/skipped | tpu passed/failed/skipped "
        "| accelerator-only on tpu (passed/failed) | other differences | skipped: needs the Hub |"
    )
    print("|---|---|---|---|---|---|---|")
    accel, other, hub = [], [], []
    for e in report:
        cpu, tpu = load(e, "cpu"), load(e, "tpu")
        diffs = compare(cpu, tpu) if cpu and tpu else []
        acc = [
            d for d in diffs if d[1] == "skipped" and _ACCELERATOR_ONLY.search(cpu.results[d[0]][1])
        ]
        rest = [d for d in diffs if d not in acc]
        needs_hub = sorted(
            {
                i
                for r in (cpu, tpu)
                if r
                for i, (o, m) in r.results.items()
                if o == "skipped" and "Hub" in m
            }
        )
        accel += [(e["suite"], *d) for d in acc]
        other += [(e["suite"], *d) for d in rest]
        hub += needs_hub
        acc_pass = sum(1 for d in acc if d[2] == "passed")
        print(
            f"| {e['library']} | {e['suite']} | {counts(cpu)} | {counts(tpu)} "
            f"| {acc_pass}/{len(acc) - acc_pass} | {len(rest)} | {len(needs_hub)} |"
        )
    if other:
        print("\nOther differences (CPU -> tpu):")
        for name, test_id, c, t, msg in other:
            print(f"  [{name}] {test_id}: {c} -> {t}" + (f"  -- {msg}" if msg else ""))
    if accel:
        print("\nAccelerator-only tests (the suite skips them on CPU), outcome on tpu:")
        for name, test_id, _c, t, msg in accel:
            print(f"  [{name}] {test_id}: {t}" + (f"  -- {msg}" if t != "passed" and msg else ""))
    if list_hub and hub:
        print("\nSkipped on both devices, need the Hugging Face Hub (offline here):")
        for i in hub:
            print("  " + i)


if __name__ == "__main__":
    sys.exit(main())
