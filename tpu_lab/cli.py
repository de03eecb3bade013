"""The ``tpu-lab`` command."""

from __future__ import annotations

import argparse
import sys

#: ``tpu-lab demo NAME``: the module of ``tpu_lab.apps`` that serves it.
DEMO_MODULES = {"image": "prompt", "video": "video", "digits": "image", "text": "text"}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tpu-lab",
        description="PyTorch on TPUs, in notebooks: a workbench for TorchTPU, with a simulated "
        "'tpu' device (on the CPU) wherever no TPU is present.",
        epilog="In Jupyter or IPython: %load_ext tpu_lab, then %tpu --help for the magics. "
        "Teaching notebooks: notebooks/00_tour.ipynb and on. 'tpu-lab COMMAND --help' explains "
        "a command; 'python -m tpu_lab' is the same as 'tpu-lab'.",
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.add_parser("doctor", help="show the environment and any misconfiguration with its fix")
    sub.add_parser("tour", help="a short terminal tour of the 'tpu' device")
    build = sub.add_parser(
        "build-core", help="compile the bundled device's C++ core for this torch (needs g++)"
    )
    build.add_argument("--verbose", action="store_true", help="show the compiler's output")
    build.add_argument(
        "--if-needed", action="store_true", help="only where no up-to-date core is built"
    )
    kernel = sub.add_parser("kernel", help="Jupyter kernel that always uses the simulated TPU")
    kernel_sub = kernel.add_subparsers(dest="kernel_command", metavar="ACTION")
    install = kernel_sub.add_parser("install", help="install the kernel spec")
    install.add_argument("--prefix", help="install under PREFIX/share/jupyter/kernels")
    install.add_argument(
        "--sys-prefix", action="store_true", help="install into this environment, not for the user"
    )
    demo = sub.add_parser("demo", help="Gradio demo apps on the 'tpu' device")
    demo_sub = demo.add_subparsers(dest="demo_command", metavar="APP")
    demos = {
        "image": ("text to image with the embedded Flux pipeline (coloured shapes)",
                  "a local FluxPipeline folder (written by scripts/train_shapes.py)"),
        "video": ("text to video with the embedded Latte pipeline (shapes in motion)",
                  "a local LattePipeline folder (written by scripts/train_clips.py)"),
        "digits": ("draw digits with the embedded class-conditional diffusion model",
                   "a local diffusers pipeline folder"),
        "text": ("continue a prompt with the embedded character model",
                 "a local model folder written by scripts/train_chars.py"),
    }  # fmt: skip
    for app, (about, model) in demos.items():
        demo_app = demo_sub.add_parser(app, help=f"{about} (or --model PATH)")
        demo_app.add_argument("--model", metavar="PATH", help=model)
        demo_app.add_argument("--device", default="tpu", help="torch device (default: tpu)")
        demo_app.add_argument("--host", default="127.0.0.1",
                              help="address to listen on (127.0.0.1)")  # fmt: skip
        demo_app.add_argument("--port", type=int, help="port (default: the first free from 7860)")
        demo_app.add_argument("--share", action="store_true",
                              help="also make a public gradio.live link")  # fmt: skip
    p.add_argument("--version", action="store_true", help="print the version and exit")
    return p


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.version:
        from ._version import __version__

        print(__version__)
        return 0
    if args.command == "doctor":
        from .doctor import diagnose

        report = diagnose()
        print(report)
        return 0 if report.ok else 1
    if args.command == "build-core":
        from .device.core import build as core

        if args.if_needed:
            built, why = core.status()
            if built:
                print(f"The compiled device core is up to date ({why}): {core.build_dir()}")
                return 0
        try:
            seconds = core.build(verbose=args.verbose)
        except RuntimeError as exc:
            print(f"tpu-lab build-core: {exc}", file=sys.stderr)
            return 1
        if seconds is None:
            print(f"The compiled device core was already up to date (built {core.built_by()}): "
                  f"{core.build_dir()}")  # fmt: skip
        else:
            print(f"Built the compiled device core in {seconds:.0f} s: {core.build_dir()}")
        return 0
    if args.command == "tour":
        from .tour import run

        return run()
    if args.command == "kernel" and args.kernel_command == "install":
        from .kernelspec import DISPLAY_NAME, install

        path = install(prefix=args.prefix, user=not args.sys_prefix)
        print(f"Installed the Jupyter kernel {DISPLAY_NAME!r} in {path}")
        return 0
    if args.command == "demo" and args.demo_command in DEMO_MODULES:
        import importlib

        from .errors import TpuLabError

        app = importlib.import_module(f"tpu_lab.apps.{DEMO_MODULES[args.demo_command]}")
        try:
            app.launch(
                args.model, device=args.device, host=args.host, port=args.port, share=args.share
            )
        except TpuLabError as exc:
            print(f"tpu-lab demo {args.demo_command}: {exc}", file=sys.stderr)
            return 2
        return 0
    parser.print_help(sys.stderr if args.command else sys.stdout)
    return 2 if args.command else 0


if __name__ == "__main__":
    sys.exit(main())
