"""Read what two of TorchTPU's compiled kernels do, from its released glue library.

    python scripts/read_torchtpu_kernels.py [PACKAGE] [--torch X.Y] [--json]

PACKAGE is an installed ``torch_tpu`` folder (default: the one in ``.venv-torchtpu``, which
``scripts/setup_torchtpu_env.sh`` makes). TorchTPU 0.2.0 ships its ATen kernels compiled, in
``csrc/common/glue_<torch>/libpywrap_<torch>_common.so``, not stripped: the kernels' names,
source paths and messages are in it, and their machine code says what they check. Two
behaviours of PyTorch's device-generic tests rest on it
(docs/compatibility/pytorch-device-tests.md):

- ``upsample_bilinear2d.out`` and ``upsample_bicubic2d.out``: which input dtypes
  ``CheckUpsampleDtypes`` refuses (a bit mask over ``c10::ScalarType`` in the code) and with
  which message; uint8 is not among them.
- ``_transformer_encoder_layer_fwd``: how its attention applies a mask (``stablehlo.select`` of
  the minimum finite value for a boolean mask, ``stablehlo.add`` for a floating one, which is what
  ``nn.TransformerEncoderLayer`` passes) and whether its softmax guards a row with no finite
  score (it does not: exp, sum and divide, so such a row is 0/0, NaN).

Needs binutils' ``nm`` and ``objdump``. Exit status 0 when every fact was found, 1 when the
library does not hold one (another TorchTPU release: the report says which), 2 for a usage error.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import struct
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]

UPSAMPLE_KERNELS = {
    "upsample_bilinear2d.out": "torch_tpu::AtenUpsampleBilinear2dOut(",
    "upsample_bicubic2d.out": "torch_tpu::AtenUpsampleBicubic2dOut(",
}
DTYPE_CHECK = "torch_tpu::(anonymous namespace)::CheckUpsampleDtypes("
ENCODER = "torch_tpu::AtenTransformerEncoderLayerFwd("
ATTENTION = "torch_tpu::(anonymous namespace)::BuildMultiheadAttentionShlo("
SOFTMAX = "torch_tpu::BuildSoftmaxShlo("
#: What a softmax would call to treat a row without a finite score apart.
GUARDS = ("stablehlo::Select(", "stablehlo::Compare(", "IsFinite")


class MissingFactError(Exception):
    """The library lacks a fact this script reads (another TorchTPU release)."""


@dataclass
class DtypeCheck:
    kernel: str
    source: str
    refused: list[str]
    message: str


@dataclass
class EncoderMasking:
    boolean_mask: list[str]
    floating_mask: list[str]
    softmax: list[str]
    softmax_guards: list[str]


@dataclass
class Report:
    library: str
    upsample: list[DtypeCheck] = field(default_factory=list)
    encoder: EncoderMasking | None = None


def scalar_types() -> list[str]:
    """``c10::ScalarType``'s names in enum order, from the installed torch's header."""
    header = Path(torch.__file__).parent / "include/torch/headeronly/core/ScalarType.h"
    text = header.read_text()
    block = text[text.index("#define AT_FORALL_SCALAR_TYPES_WITH_COMPLEX_AND_QINTS") :]
    names = re.findall(r"_\([^,]+,\s*(\w+)\)\s*/\*\s*(\d+)\s*\*/", block.split("\n\n")[0])
    return [name for name, _ in sorted(names, key=lambda item: int(item[1]))]


class Library:
    """One shared library: its symbols (demangled, with sizes) and its read-only bytes."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.data = path.read_bytes()
        listing = subprocess.run(
            ["nm", "-C", "-S", "--defined-only", str(path)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        self.symbols: list[tuple[int, int, str]] = []
        for line in listing.splitlines():
            parts = line.split(" ", 3)
            if len(parts) == 4 and parts[2] in "tTwW":
                self.symbols.append((int(parts[0], 16), int(parts[1], 16), parts[3]))

    def function(self, prefix: str) -> list[tuple[int, int, str]]:
        found = [s for s in self.symbols if s[2].startswith(prefix)]
        if not found:
            raise MissingFactError(f"no function {prefix}...) in {self.path.name}")
        return found

    def disassemble(self, start: int, size: int) -> list[str]:
        out = subprocess.run(
            [
                "objdump",
                "-d",
                "-C",
                "--no-show-raw-insn",
                f"--start-address={start:#x}",
                f"--stop-address={start + size:#x}",
                str(self.path),
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        return [line for line in out.splitlines() if re.match(r"\s+[0-9a-f]+:\t", line)]

    def string_at(self, address: int) -> str:
        offset = self._file_offset(address)
        return self.data[offset : self.data.index(b"\0", offset)].decode()

    def _file_offset(self, address: int) -> int:
        (phoff,) = struct.unpack_from("<Q", self.data, 0x20)
        size, count = struct.unpack_from("<HH", self.data, 0x36)
        for i in range(count):
            kind, _, offset, vaddr, _, filesz = struct.unpack_from(
                "<IIQQQQ", self.data, phoff + i * size
            )
            if kind == 1 and vaddr <= address < vaddr + filesz:
                return offset + address - vaddr
        raise MissingFactError(f"address {address:#x} is in no loaded segment of {self.path.name}")


def calls(lines: list[str]) -> list[tuple[int, str]]:
    """``(target address, demangled name)`` of each direct call, in code order."""
    out = []
    for line in lines:
        m = re.search(r"\tcall\s+([0-9a-f]+) <(.+)>$", line)
        if m:
            out.append((int(m.group(1), 16), m.group(2).removesuffix("@plt")))
    return out


def short(name: str) -> str:
    """``mlir::stablehlo::Add`` for ``mlir::stablehlo::Add(mlir::MlirOp&, ...)``."""
    return name.split("(", 1)[0].split("<", 1)[0] if "::" in name else name


def read_dtype_check(lib: Library, op: str, kernel: str, names: list[str]) -> DtypeCheck:
    start, size, _ = lib.function(kernel)[0]
    targets = [
        addr for addr, name in calls(lib.disassemble(start, size)) if name.startswith(DTYPE_CHECK)
    ]
    if not targets:
        raise MissingFactError(f"{kernel}...) calls no {DTYPE_CHECK}...)")
    check = next(s for s in lib.function(DTYPE_CHECK) if s[0] == targets[0])
    lines = lib.disassemble(check[0], check[1])
    text = "\n".join(lines)
    bound = re.search(r"cmp\s+\$0x([0-9a-f]+),%dil\n.*\tja\s", text)
    mask = re.search(r"mov\s+\$0x([0-9a-f]+),%ecx\n.*\tbt\s+%eax,%ecx", text)
    if not (bound and mask):
        raise MissingFactError(f"{DTYPE_CHECK}...) at {check[0]:#x} tests no dtype bit mask")
    bits, highest = int(mask.group(1), 16), int(bound.group(1), 16)
    refused = [names[i] for i in range(highest + 1) if bits >> i & 1]
    strings = [lib.string_at(int(a, 16)) for a in re.findall(r"# ([0-9a-f]+) <", text)]
    source = next((s for s in strings if s.startswith("csrc/")), "?")
    line = re.search(r"mov\s+\$0x([0-9a-f]+),%ecx\n.*\txor\s+%esi,%esi\n.*Status::MakeRep", text)
    message = next((s for s in strings if "not implemented" in s), "?")
    where = f"{source}:{int(line.group(1), 16)}" if line else source
    return DtypeCheck(f"{op} ({kernel.removesuffix('(')})", where, refused, message)


def read_encoder(lib: Library) -> EncoderMasking:
    start, size, _ = lib.function(ENCODER)[0]
    first = [name for _, name in calls(lib.disassemble(start, size))]
    lambdas = [
        s
        for s in lib.symbols
        if ENCODER.removesuffix("(") in s[2] and "$_1" in s[2] and "RemoteInvoker" in s[2]
    ]
    built = [name for s in lambdas for _, name in calls(lib.disassemble(s[0], s[1]))]
    if not any(name.startswith(ATTENTION) for name in first + built):
        raise MissingFactError(f"{ENCODER}...) does not build its attention with {ATTENTION}...)")
    start, size, _ = lib.function(ATTENTION)[0]
    names = [short(name) for _, name in calls(lib.disassemble(start, size))]
    try:
        branch = names.index("mlir::Type::isInteger")
        select = names.index("mlir::stablehlo::Select", branch)
        add = names.index("mlir::stablehlo::Add", select)
        softmax = names.index("torch_tpu::BuildSoftmaxShlo", add)
    except ValueError as err:
        raise MissingFactError(f"{ATTENTION}...) masks its scores another way ({err})") from None
    keep = ("GetMinFiniteValueAttr", "Select", "CastIfNeeded", "Add", "BuildSoftmaxShlo")
    boolean = [n for n in names[branch : select + 1] if n.endswith(keep)]
    floating = [n for n in names[select + 1 : softmax + 1] if n.endswith(keep)]
    start, size, _ = lib.function(SOFTMAX)[0]
    soft = [name for _, name in calls(lib.disassemble(start, size))]
    steps = (
        "GetVerifiedMinFiniteValue",
        "Reduce",
        "Subtract",
        "Exp",
        "BuildSumShlo",
        "Log",
        "Div",
        "Mul",
    )
    return EncoderMasking(
        boolean_mask=boolean,
        floating_mask=floating,
        softmax=[short(n) for n in soft if short(n).endswith(steps)],
        softmax_guards=[short(n) for n in soft if any(g in n for g in GUARDS)],
    )


def read(package: Path, torch_version: str) -> Report:
    tag = torch_version.replace(".", "_") + "_0"
    path = package / f"csrc/common/glue_{tag}/libpywrap_{tag}_common.so"
    if not path.exists():
        raise FileNotFoundError(
            f"{path} does not exist: is {package} an installed torch_tpu "
            f"folder with a build for torch {torch_version}?"
        )
    lib = Library(path)
    names = scalar_types()
    report = Report(str(path.relative_to(package.parent)))
    for op, kernel in UPSAMPLE_KERNELS.items():
        report.upsample.append(read_dtype_check(lib, op, kernel, names))
    report.encoder = read_encoder(lib)
    return report


def render(report: Report) -> str:
    out = [f"TorchTPU's glue library: {report.library}", ""]
    for check in report.upsample:
        out.append(f"{check.kernel}")
        out.append(
            f"  CheckUpsampleDtypes ({check.source}) refuses {', '.join(check.refused)}"
            f" with {check.message!r} + the dtype; every other dtype, Byte (uint8) among"
            " them, goes on to the kernel"
        )
    enc = report.encoder
    out += [
        "",
        f"_transformer_encoder_layer_fwd ({ENCODER.removesuffix('(')})",
        "  a boolean mask: " + " -> ".join(enc.boolean_mask),
        "  a floating mask (what nn.TransformerEncoderLayer passes): "
        + " -> ".join(enc.floating_mask),
        "  softmax: " + " -> ".join(enc.softmax),
        "  softmax guards for a row with no finite score: "
        + (", ".join(enc.softmax_guards) or "none (exp(-inf) = 0 everywhere, 0 / 0: NaN)"),
    ]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    default = next(
        iter(sorted(ROOT.glob(".venv-torchtpu/lib/python*/site-packages/torch_tpu"))), None
    )
    parser.add_argument(
        "package",
        nargs="?",
        type=Path,
        default=default,
        help="an installed torch_tpu folder (default: .venv-torchtpu's)",
    )
    parser.add_argument(
        "--torch",
        default=".".join(torch.__version__.split(".")[:2]),
        help="the torch version whose build to read (default: this torch's)",
    )
    parser.add_argument("--json", action="store_true", help="print the facts as JSON")
    args = parser.parse_args(argv)
    if args.package is None:
        parser.error(
            "no torch_tpu folder given and no .venv-torchtpu: run "
            "scripts/setup_torchtpu_env.sh or pass the folder"
        )
    missing = [tool for tool in ("nm", "objdump") if shutil.which(tool) is None]
    if missing:
        parser.error(f"{' and '.join(missing)} not found: install binutils")
    try:
        report = read(args.package, args.torch)
    except FileNotFoundError as err:
        parser.error(str(err))
    except MissingFactError as err:
        print(f"not found: {err}", file=sys.stderr)
        return 1
    print(json.dumps(asdict(report), indent=2) if args.json else render(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
