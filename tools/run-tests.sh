#!/usr/bin/env bash
# The test command (README): build everything, run the C++ tests (CPU tests; GPU tests skip with
# "no CUDA device" where there is none) and the Python tests against the library just built.
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
