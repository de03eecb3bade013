#!/usr/bin/env bash
# The device suites on other torch minors: for each version given (default: 2.11.0 2.14.1),
# a venv .venv-torch-VERSION with that torch and tpu_lab[hf,dev], the compiled core built for
# it, and the device suites run on it.
#   scripts/torch_matrix.sh 2.14.1          # one version
# Versions other than the local 2.13.0+cpu come from PyPI as CUDA builds (about 3 GB each with
# their libraries; a few minutes to install). Prints one summary line per version.
set -uo pipefail
cd "$(dirname "$0")/.."
versions=("$@")
[ ${#versions[@]} -gt 0 ] || versions=(2.11.0 2.14.1)
# MATRIX_TESTS overrides the suites (a space-separated list of pytest arguments)
read -r -a suites <<<"${MATRIX_TESTS:-tests/test_device.py tests/test_device_ops.py \
tests/test_memory.py tests/test_serialization.py tests/test_parameters.py tests/test_fuse.py \
tests/test_tpu_module.py tests/test_training.py tests/test_patches.py}"
status=0
summary=()
for version in "${versions[@]}"; do
    venv=".venv-torch-$version"
    if ! VENV="$venv" TORCH_VERSION="$version" TORCH_CPU_INDEX= scripts/setup.sh dev; then
        summary+=("torch $version: setup failed")
        status=1
        continue
    fi
    log="$venv/pytest.log"
    "$venv/bin/python" -m pytest -q -p no:cacheprovider "${suites[@]}" >"$log" 2>&1
    code=$?
    [ "$code" -eq 0 ] || status=1
    summary+=("torch $version: $(tail -n 1 "$log") (exit $code; log $log)")
done
printf '%s\n' "${summary[@]}"
exit "$status"
