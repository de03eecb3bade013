#!/usr/bin/env bash
# Create .venv and install tpu_lab with the extras named in $1 (default: hf), torch
# $TORCH_VERSION (default 2.13.0), and build the bundled device's compiled core; where all of
# it is there already (scripts/installed.py), install nothing.
# torch comes from PyTorch's CPU wheel index when it is reachable, so that a machine without
# a GPU never downloads the multi-GB CUDA build; elsewhere pip's configured indexes are used.
set -euo pipefail
extras="${1:-hf}"
venv="${VENV:-.venv}"
python="${PYTHON:-python3}"
cpu_index="${TORCH_CPU_INDEX-https://download.pytorch.org/whl/cpu}"

# Already set up (make lab after make run): every requirement installed, the core built
if [ -x "$venv/bin/python" ] && "$venv/bin/python" "$(dirname "$0")/installed.py" "$extras" \
    2>/dev/null && "$venv/bin/tpu-lab" build-core --if-needed >/dev/null 2>&1; then
    echo "tpu_lab is installed in $venv with extras [$extras]: nothing to install"
    exit 0
fi
if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip)
"${pip[@]}" install --quiet --upgrade pip

torch_args=("torch==${TORCH_VERSION:-2.13.0}")
if [ -n "$cpu_index" ] && "$venv/bin/python" - "$cpu_index" <<'PY'
import sys, urllib.request
try:
    urllib.request.urlopen(sys.argv[1] + "/torch/", timeout=5)
except Exception:
    sys.exit(1)
PY
then
    torch_args+=(--extra-index-url "$cpu_index")
fi
"${pip[@]}" install --quiet "${torch_args[@]}"
# Without build isolation the install sees torch and compiles the bundled device's C++ core
# (hatch_build.py; about a minute with g++); build-core --if-needed is the safety net, and where
# neither can build it the pure-Python core runs instead and `tpu-lab doctor` says why.
"${pip[@]}" install --quiet "hatchling>=1.25" editables
"${pip[@]}" install --quiet --no-build-isolation -e ".[${extras}]"
if ! "$venv/bin/tpu-lab" build-core --if-needed; then
    echo "tpu_lab: the compiled device core was not built; the pure-Python core runs instead" >&2
fi
echo "tpu_lab installed in $venv with extras [$extras]"
