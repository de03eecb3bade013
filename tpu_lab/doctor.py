"""``tpu-lab doctor``: the environment, and every misconfiguration with its fix."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version

from . import _install, colab
from .runtime import select
from .views.base import counted

#: The torch minor versions the bundled device is tested on (scripts/torch_matrix.sh).
TESTED_TORCH = ("2.11", "2.12", "2.13", "2.14")
_ENV_VARS = (
    "TPU_LAB_BACKEND",
    "TPU_LAB_TOPOLOGY",
    "TPU_LAB_COMPILE_LOWERING",
    "TORCH_DEVICE_BACKEND_AUTOLOAD",
    "PJRT_DEVICE",
)
_OPTIONAL = (
    ("transformers", "hf"),
    ("diffusers", "hf"),
    ("accelerate", "hf"),
    ("safetensors", "hf"),
    ("ipywidgets", None),
    ("anywidget", "lab"),
    ("jupyterlab", "lab"),
    ("gradio", "demo"),
)


def _version(dist: str) -> str | None:
    try:
        return version(dist)
    except PackageNotFoundError:
        return None


@dataclass
class Report:
    """Rows of ``(name, value)``, advice for where this runs, and problems as ``(what is
    wrong, how to fix it)``."""

    rows: list[tuple[str, str]] = field(default_factory=list)
    advice: list[str] = field(default_factory=list)
    problems: list[tuple[str, str]] = field(default_factory=list)

    def __str__(self) -> str:
        width = max(len(name) for name, _ in self.rows)
        lines = ["tpu-lab doctor", ""]
        lines += [f"  {name.ljust(width)}  {value}" for name, value in self.rows]
        lines.append("")
        lines += [*self.advice, ""] if self.advice else []
        if not self.problems:
            lines.append("No problems found.")
        for what, fix in self.problems:
            lines += [f"PROBLEM: {what}", f"    fix: {fix}"]
        return "\n".join(lines)

    @property
    def ok(self) -> bool:
        return not self.problems


def _device_core(r: Report) -> None:
    """The bundled device's compiled core: built for this torch, how and in how long."""
    from .device import core

    built, why = core.build.status()
    r.rows.append(("device core", why))
    if not built:
        r.problems.append(
            (
                f"the bundled device's compiled core is {why}.",
                "tpu-lab build-core, or import tpu_lab (needs a C++ compiler: Debian/Ubuntu "
                "apt-get install g++; macOS xcode-select --install)",
            )
        )


def diagnose() -> Report:
    """Inspect this process and machine; never raises for a misconfiguration."""
    import torch

    from ._version import __version__

    r = Report()
    r.rows.append(("tpu_lab", __version__))
    r.rows.append(("python", sys.version.split()[0]))
    cuda = torch.version.cuda
    r.rows.append(("torch", torch.__version__ + (f" (CUDA {cuda} build)" if cuda else "")))
    if torch.__version__.split("+")[0].rsplit(".", 1)[0] not in TESTED_TORCH:
        r.problems.append(
            (
                f"torch {torch.__version__} is installed; the bundled device is tested with "
                f"torch {', '.join(TESTED_TORCH)}.",
                "pip install 'torch==2.13.*' (CPU build: add --index-url "
                "https://download.pytorch.org/whl/cpu on machines without a GPU).",
            )
        )
    if cuda and not torch.cuda.is_available():
        r.problems.append(
            (
                "a CUDA build of torch is installed on a machine without a GPU (gigabytes unused).",
                "pip install --force-reinstall 'torch==2.13.*' --index-url "
                "https://download.pytorch.org/whl/cpu",
            )
        )
    state = select.torch_tpu_state()
    tt = _version("torch-tpu")
    r.rows.append(("torch_tpu", f"{tt or 'not installed'} ({state})"))
    from .runtime.torch_tpu_finder import describe

    r.rows.append(("stand-in", describe()))  # for `import torch_tpu`
    r.rows.append(("libtpu", _version("libtpu") or "not installed"))
    hardware = select.tpu_hardware_present()
    r.rows.append(("TPU hardware", "present" if hardware else "none (no /dev/accel*, /dev/vfio/N)"))
    active = select.activate()
    if active is None:
        r.rows.append(("backend", "none"))
        problem, _, fix = select.conflict().partition(" Fix: ")
        r.problems.append((problem, fix or "see the message above."))
    else:
        s = active.status()
        r.rows.append(("backend", s.backend + (" (simulated)" if s.simulated else "")))
        r.rows.append(("device", f"tpu:0 = {s.device_name}"))
        r.rows.append(("topology", f"{s.topology} {s.topology_shape}, {counted(s.chips, 'chip')}"))
        r.rows.append(("HBM per chip", _gib(s.memory.capacity)))
        r.rows.append(("eager mode", s.eager_mode))
        if s.simulated:
            _device_core(r)
        if hardware and s.simulated:
            r.problems.append(
                (
                    "this machine has TPU chips but tpu_lab is simulating one.",
                    f"{_install.hint('tpu')} and unset "
                    "TPU_LAB_BACKEND to use TorchTPU.",
                )
            )
    for dist, extra in _OPTIONAL:
        v = _version(dist)
        hint = f" ({_install.hint(extra)})" if extra and v is None else ""
        r.rows.append((dist, (v or "not installed") + hint))
    for var in _ENV_VARS:
        if var in os.environ:
            r.rows.append((f"${var}", os.environ[var]))
    if colab.in_colab():
        _colab(r, active is not None and not active.status().simulated)
    return r


def _colab(r: Report, real_tpu: bool) -> None:
    """Which Colab runtime this is, and what to do on it."""
    kind = colab.accelerator()
    r.rows.insert(2, ("Colab", f"{kind.upper()} runtime ({os.environ['COLAB_RELEASE_TAG']})"))
    install = _install.hint("hf", "tpu")
    if kind == "tpu" and real_tpu:
        r.advice.append("Colab TPU runtime: tpu:0 is this runtime's TPU chip, driven by TorchTPU.")
    elif kind == "tpu":
        r.advice.append(
            "Colab TPU runtime: TorchTPU is not installed, so 'tpu' is the simulated device. "
            f"To use the chips: {install}, then Runtime > Restart session."
        )
    elif kind == "gpu":
        r.advice.append(
            "Colab GPU runtime: 'tpu' is the simulated device, computing on the CPU; the GPU "
            "stays CUDA's (torch.compile and float32 matmul precision work for it as without "
            "tpu-lab). For TPU chips: Runtime > Change runtime type > a TPU."
        )
    else:
        r.advice.append(
            "Colab CPU runtime: 'tpu' is the simulated device. For TPU chips: Runtime > "
            "Change runtime type > a TPU."
        )


def _gib(n: int) -> str:
    return f"{n / (1 << 30):.0f} GiB"
