#!/usr/bin/env bash
# The test command (README): build everything, run the C++ tests (CPU tests; GPU tests skip with
# "no CUDA device" where there is none), the Python tests against the library just built, then
# `pip install ./python` into a fresh venv and the Python CPU tests against that installed package.
#   tools/run-tests.sh            full build (all dtypes and head dims)
#   FLASH4_CMAKE_ARGS="-DFLASH4_HEAD_DIMS=128 -DFLASH4_DTYPES=bf16" tools/run-tests.sh   fast inner loop
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${FLASH4_BUILD_DIR:-$root/build}
jobs=$(nproc)

start=$(date +%s)
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release ${FLASH4_CMAKE_ARGS:-}
cmake --build "$build" -j "$jobs"
echo "flash4: build took $(( $(date +%s) - start )) s on $jobs cores"

ctest --test-dir "$build" --output-on-failure -j "$jobs"

cd "$root"
FLASH4_LIBRARY="$build/libflash4.so" PYTHONPATH="$root/python" python3 -m pytest -q -p no:cacheprovider tests/python

# The package as users install it: `pip install ./python` into a fresh venv, then the Python CPU tests
# against the installed copy (tools/check-pip-install.sh). FLASH4_SKIP_PIP_CHECK=1 skips it in the inner loop.
if [ "${FLASH4_SKIP_PIP_CHECK:-0}" != 1 ]; then
  bash "$root/tools/check-pip-install.sh"
fi
