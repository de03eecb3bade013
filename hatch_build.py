"""Hatchling build hook: compile the bundled device's C++ core while pip installs tpu_lab.

The core is compiled against the torch of the environment it will run in, so the build can
only do it where that torch is importable: ``pip install --no-build-isolation`` with torch
installed first (what ``scripts/setup.sh`` does). In an isolated build (pip's default) torch
is absent: the install still succeeds, says so, and ``tpu-lab build-core`` (or the first
``import tpu_lab``) builds it. Where the compiler fails, the same. ``TPU_LAB_BUILD_CORE=0``
skips it.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

_CORE = Path(__file__).resolve().parent / "tpu_lab" / "device" / "core" / "build.py"


class CoreBuildHook(BuildHookInterface):
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict) -> None:
        if self.target_name != "wheel" or os.environ.get("TPU_LAB_BUILD_CORE", "1") == "0":
            return
        if importlib.util.find_spec("torch") is None:
            self.app.display_warning(
                "tpu_lab: torch is not importable by this build (pip's build isolation), so the "
                "compiled device core is not built here; `tpu-lab build-core` or the first "
                "`import tpu_lab` builds it (or install with --no-build-isolation after torch)."
            )
            return
        # build.py imports only torch and the standard library: load it by path, without
        # importing tpu_lab (which would start the device)
        spec = importlib.util.spec_from_file_location("_tpu_lab_core_build", _CORE)
        core = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = core  # its dataclasses look their module up there
        spec.loader.exec_module(core)
        try:
            seconds = core.build(how="pip install")
        except RuntimeError as exc:
            self.app.display_warning(f"tpu_lab: {exc}")
            return
        if seconds is None:
            self.app.display_info(
                f"tpu_lab: the compiled device core is up to date (built {core.built_by()})"
            )
        else:
            self.app.display_info(f"tpu_lab: built the compiled device core in {seconds:.0f} s")
        if version != "editable":  # a wheel carries the library; an editable install reads it
            for built in core.artifacts():
                build_data["force_include"][str(built)] = (
                    f"tpu_lab/device/core/_build/{built.parent.name}/{built.name}"
                )
            build_data["pure_python"] = False
            build_data["infer_tag"] = True
