#!/usr/bin/env bash
# A second environment with the real torch-tpu (no TPU needed) for tests/test_torchtpu_contract.py,
# which checks the bundled device and the TorchTPU adapter against TorchTPU's own Python API.
set -euo pipefail
venv="${TORCHTPU_VENV:-.venv-torchtpu}"
python="${PYTHON:-python3}"
if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet --upgrade pip
"$venv/bin/python" -m pip install --quiet "torch==2.13.0" "torch-tpu==0.2.0"
"$venv/bin/python" -m pip install --quiet --no-deps -e .
echo "torch-tpu test environment ready in $venv"
