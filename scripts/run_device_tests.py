"""Run PyTorch's device-generic test files on the CPU and on "tpu", and compare each test with
its twin.

    python scripts/run_device_tests.py FOLDER [FILE ...] [--python PY] [--timeout S]
                                       [--markdown OUT]

With tpu-lab installed, ``instantiate_device_type_tests`` gives every device-generic test a
"tpu" twin (``test_add_cpu_float32`` and ``test_add_tpu_float32``, in ``TestFooCPU`` and
``TestFooPRIVATEUSE1`` or ``TestFooTPU``). Each file runs once, in one pytest process under PY
(default: this interpreter) with PyTorch's device-backend autoload on, both instantiations
together; the outcomes are recorded by :mod:`run_torch_suites`' pytest plugin.

FOLDER holds the test files read from PyTorch's repository, each at the path it has there, kept
outside this repository; FILE is a path relative to FOLDER (default: :data:`FILES`). The report
gives, per file: the tests paired with a twin, those that passed on the CPU, and of those the
ones that passed on "tpu"; then every test that passed on the CPU and not on "tpu", grouped by
its cause (the first line of its failure). Each such "tpu" twin then runs again alone, in a
fresh pytest process: one that passes there is counted as passed and listed apart (its CPU twin
ran first in the same process and used up a warning PyTorch gives once per process, say). A
cause in :data:`EXPLAINED` (for any test, or for the tests it names) is a behaviour the
bundled device shares with TorchTPU (docs/compatibility/pytorch-device-tests.md quotes
TorchTPU's source for each); any other is unexplained. A file that does not import on this
torch is reported with the name it lacks, or with its error when it lacks none. Exit status 0
when no difference is unexplained, 1 otherwise, 2 for a usage error. ``--markdown OUT`` also
writes the per-file table and the differences as Markdown.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import run_torch_suites as suites
from run_torch_suites import Outcome

#: The device-generic files of issue 42, as in PyTorch's repository; test_nn and test_autograd
#: run their device tests only (:data:`SELECT`).
FILES = (
    "test/test_view_ops.py",
    "test/test_shape_ops.py",
    "test/test_indexing.py",
    "test/test_sort_and_select.py",
    "test/test_reductions.py",
    "test/test_unary_ufuncs.py",
    "test/test_binary_ufuncs.py",
    "test/test_tensor_creation_ops.py",
    "test/nn/test_pooling.py",
    "test/nn/test_convolution.py",
    "test/test_nn.py",
    "test/test_autograd.py",
)
#: pytest ``-k`` expressions for the files whose device tests are a part of them.
SELECT = {"test/test_nn.py": "DeviceType", "test/test_autograd.py": "DeviceType"}

#: Differences TorchTPU shares: (pattern of the "tpu" twin's failure, pattern of the test's name
#: or None for any test, why); docs/compatibility/pytorch-device-tests.md quotes TorchTPU for each.
EXPLAINED = (
    (
        re.compile(r"quantized tensors cannot be on the 'tpu' device"),
        None,
        "quantized tensors: TorchTPU has no quantized kernels",
    ),
    (
        re.compile(r"sparse operators are not supported on TPU yet"),
        None,
        "a sparse op TorchTPU has no sparse kernel for",
    ),
    (
        re.compile(r"with arguments from the 'NestedTensortpu' backend"),
        None,
        "strided nested tensors: TorchTPU registers no NestedTensorPrivateUse1 kernels",
    ),
    (
        re.compile(r"RuntimeError not raised"),
        re.compile(r"test_upsamplingBiMode2d_nonsupported_dtypes_.*_uint8"),
        "uint8 bilinear/bicubic interpolation: TorchTPU's CheckUpsampleDtypes refuses Int, Long "
        "and Bool only (scripts/read_torchtpu_kernels.py)",
    ),
    (
        re.compile(r"AssertionError: False is not true"),
        re.compile(r"test_transformerencoderlayer_"),
        "a fully masked row of the fused encoder layer: TorchTPU adds the -inf mask and its "
        "softmax divides 0 by 0, NaN (scripts/read_torchtpu_kernels.py)",
    ),
)

_DEVICE_CLASS = re.compile(r"(CPU|PRIVATEUSE1|TPU)$")
_DEVICE_TOKEN = re.compile(r"_(cpu|tpu)(?=_|$)")
_MISSING = (
    re.compile(r"cannot import name '([^']+)'"),
    re.compile(r"has no attribute '([^']+)'"),
    re.compile(r"No module named '([^']+)'"),
)


def twin_key(test_id: str) -> tuple[str, str] | None:
    """``(file::class, test)`` with the device taken out, and which device; None for a test
    that is not device-generic."""
    parts = test_id.split("::")
    if len(parts) != 3 or not _DEVICE_CLASS.search(parts[1]):
        return None
    tokens = list(_DEVICE_TOKEN.finditer(parts[2]))
    if not tokens:
        return None
    last = tokens[-1]
    name = parts[2][: last.start()] + "_{device}" + parts[2][last.end() :]
    return f"{parts[0]}::{_DEVICE_CLASS.sub('', parts[1])}::{name}", last.group(1)


@dataclass
class Pair:
    name: str
    cpu: Outcome
    tpu: Outcome


def pairs(results: dict[str, Outcome]) -> list[Pair]:
    """The tests that have both twins, in name order."""
    sides: dict[str, dict[str, Outcome]] = defaultdict(dict)
    for test_id, outcome in results.items():
        key = twin_key(test_id)
        if key is not None:
            sides[key[0]][key[1]] = outcome
    return [Pair(n, s["cpu"], s["tpu"]) for n, s in sorted(sides.items()) if len(s) == 2]


def explanation(cause: str, test: str) -> str | None:
    """Why ``test``'s "tpu" twin failed with ``cause`` where its CPU twin passed, if TorchTPU
    shares that."""
    for failure, name, why in EXPLAINED:
        if failure.search(cause) and (name is None or name.search(test)):
            return why
    return None


def import_failure(message: str) -> str:
    """Why a test file did not import, from its collection error: the name it lacks, or the
    error itself when it lacks none (a helper of this torch that rejects the file's use of it)."""
    for pattern in _MISSING:
        found = pattern.search(message)
        if found:
            return f"missing: {found.group(1)}"
    return message


@dataclass
class FileReport:
    file: str
    paired: int = 0
    cpu_passed: int = 0
    tpu_passed: int = 0
    #: (cause, why TorchTPU shares it or None) -> the tests whose CPU twin passed and "tpu"
    #: twin failed
    causes: dict[tuple[str, str | None], list[str]] = field(default_factory=dict)
    #: reason -> the tests whose CPU twin passed and "tpu" twin the test itself skipped (a
    #: device restriction such as ``@onlyCPU``) or expects to fail there
    skipped: dict[str, list[str]] = field(default_factory=dict)
    #: the tests whose "tpu" twin failed after its CPU twin in one process and passed alone
    alone: list[str] = field(default_factory=list)
    #: the "tpu" twins that failed, by test id (for the run alone)
    failed_ids: list[str] = field(default_factory=list)
    import_error: str | None = None
    stopped: bool = False

    @property
    def skipped_count(self) -> int:
        return sum(len(t) for t in self.skipped.values())

    @property
    def differ(self) -> int:
        return sum(len(t) for t in self.causes.values())

    @property
    def unexplained(self) -> int:
        return sum(len(t) for (_, why), t in self.causes.items() if why is None)


def report(file: str, run: suites.FileRun) -> FileReport:
    """Pair the twins of one file's run and count them."""
    result = FileReport(file, stopped=run.returncode is None)
    errors = [o.message for t, o in run.results.items() if o.status == "error" and "::" not in t]
    if errors and not any("::" in t for t in run.results):
        result.import_error = import_failure(errors[0])
        return result
    tpu_ids = {twin_key(t)[0]: t for t in run.results if (twin_key(t) or ("", ""))[1] == "tpu"}
    for pair in pairs(run.results):
        result.paired += 1
        if pair.cpu.status != "passed":
            continue
        result.cpu_passed += 1
        name = pair.name.split("::", 1)[1]
        if pair.tpu.status == "passed":
            result.tpu_passed += 1
        elif pair.tpu.status in ("skipped", "xfailed"):
            result.skipped.setdefault(pair.tpu.message, []).append(name)
        else:
            cause = pair.tpu.message or pair.tpu.status
            key = (cause, explanation(cause, name))
            result.causes.setdefault(key, []).append(name)
            result.failed_ids.append(tpu_ids[pair.name])
    return result


def count_alone(result: FileReport, alone: dict[str, Outcome]) -> None:
    """Move the "tpu" twins that passed when run alone (``alone``, by test id) out of the
    differences."""
    for test_id in result.failed_ids:
        if alone.get(test_id, Outcome("not run")).status != "passed":
            continue
        name = twin_key(test_id)[0].split("::", 1)[1]
        for cause, tests in list(result.causes.items()):
            if name in tests:
                tests.remove(name)
                if not tests:
                    del result.causes[cause]
        result.alone.append(name)
        result.tpu_passed += 1


def render(r: FileReport) -> str:
    if r.import_error is not None:
        return f"{r.file}: does not import on this torch ({r.import_error})"
    stopped = "  (stopped by the timeout)" if r.stopped else ""
    lines = [
        f"{r.file}: {r.paired} paired, {r.cpu_passed} passed on the CPU, "
        f"{r.tpu_passed} of those on 'tpu', {r.skipped_count} skipped there by the test"
        f"{stopped}"
    ]
    for reason, tests in sorted(r.skipped.items(), key=lambda c: -len(c[1])):
        lines.append(f"  {len(tests)} skipped on 'tpu' by the test: {reason}")
    for name in r.alone:
        lines.append(f"  passed on 'tpu' when run alone (failed after its CPU twin): {name}")
    for (cause, why), tests in sorted(r.causes.items(), key=lambda c: -len(c[1])):
        label = f"shared with TorchTPU: {why}" if why else "UNEXPLAINED"
        lines.append(f"  {len(tests)} differ, {label}: {cause}")
        lines += [f"    {t}" for t in tests]
    return "\n".join(lines)


def markdown(reports: list[FileReport]) -> str:
    rows = [
        "| file | paired | passed on the CPU | of those, on 'tpu' | skipped on 'tpu' by the "
        "test | differences |"
    ]
    rows.append("|---|---:|---:|---:|---:|---|")
    for r in reports:
        if r.import_error is not None:
            rows.append(f"| `{r.file}` | - | - | - | - | does not import ({r.import_error}) |")
            continue
        note = f"{r.differ} ({r.unexplained} unexplained)" if r.differ else "0"
        stopped = " (stopped by the timeout)" if r.stopped else ""
        rows.append(
            f"| `{r.file}`{stopped} | {r.paired} | {r.cpu_passed} | {r.tpu_passed} | "
            f"{r.skipped_count} | {note} |"
        )
    lines = ["\n".join(rows), ""]
    for r in reports:
        for name in r.alone:
            lines.append(f"- `{r.file}`, passed on 'tpu' when run alone: `{name}`")
        for (cause, why), tests in r.causes.items():
            lines.append(f"- `{r.file}`, {len(tests)} ({why or 'unexplained'}): `{cause}`")
            lines += [f"  - `{t}`" for t in tests]
    return "\n".join(lines).rstrip() + "\n"


def run_one(
    python: str, folder: Path, file: str, work: Path, timeout: float, nodes: list[str] = ()
) -> suites.FileRun:
    """One pytest process for ``file`` (only ``nodes``, test ids, where given)."""
    tag = Path(file).stem + ("-alone" if nodes else "")
    log, cache = work / f"{tag}.jsonl", work / f"{tag}-inductor"
    env = suites.child_env(suites.WITH, log, cache)
    extra = ["-k", SELECT[file]] if file in SELECT and not nodes else []
    return suites.run_file(python, folder, file, env, log, timeout, extra, nodes)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="where PyTorch's test files are kept")
    parser.add_argument("files", nargs="*", help="paths relative to FOLDER (default: see above)")
    parser.add_argument("--python", default=sys.executable, help="an environment with tpu-lab")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds per file")
    parser.add_argument("--markdown", type=Path, help="also write the table here")
    args = parser.parse_args(argv)
    files = args.files or list(FILES)
    torch_version, installed = suites.probe(args.python)
    if not installed:
        parser.error(f"{args.python} has no tpu-lab installed (no 'torch.backends' entry point)")
    print(f"torch {torch_version}; {args.python}\n", flush=True)
    reports = []
    with tempfile.TemporaryDirectory(prefix="device-tests-") as work:
        for file in files:
            if not (args.folder / file).is_file():
                print(f"{file}: not in {args.folder} (read it from pytorch/pytorch)\n")
                continue
            run = run_one(args.python, args.folder, file, Path(work), args.timeout)
            result = report(file, run)
            if result.failed_ids:
                again = run_one(
                    args.python, args.folder, file, Path(work), args.timeout, result.failed_ids
                )
                count_alone(result, again.results)
            reports.append(result)
            print(render(reports[-1]) + "\n", flush=True)
    unexplained = sum(r.unexplained for r in reports)
    total = [sum(getattr(r, n) for r in reports) for n in ("paired", "cpu_passed", "tpu_passed")]
    print(
        f"{len(reports)} files: {total[0]} paired, {total[1]} passed on the CPU, {total[2]} of "
        f"those on 'tpu'; {unexplained} differences unexplained."
    )
    if args.markdown:
        args.markdown.write_text(markdown(reports))
    return 1 if unexplained else 0


if __name__ == "__main__":
    sys.exit(main())
