#!/usr/bin/env bash
# The main job (README): build, then run flash4-bench on the anchors' sweep at head dim 128 with
# --verify. On a machine without a CUDA device flash4-bench says so and runs the CPU reference demo.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${FLASH4_BUILD_DIR:-$root/build}
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASH4_BUILD_TESTS=OFF ${FLASH4_CMAKE_ARGS:-}
cmake --build "$build" -j "$(nproc)" --target flash4-bench
"$build/flash4-bench" --all --D "${FLASH4_BENCH_D:-128}" --verify "$@"
