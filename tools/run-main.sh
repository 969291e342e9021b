#!/usr/bin/env bash
# The main job (README): build the library and flash4-bench, then run flash4-bench on the anchors' sweep at head
# dim 128 with --verify. On a machine without a CUDA device flash4-bench says so and runs the CPU reference demo.
# Shares its build folder and configuration with tools/run-tests.sh, so the two run in either order.
# Environment: FLASH4_BUILD_DIR (default build/), FLASH4_CMAKE_ARGS (tools/build.sh), FLASH4_BENCH_D (default 128);
# extra arguments go to flash4-bench.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${FLASH4_BUILD_DIR:-$root/build}
bash "$root/tools/install-deps.sh"
bash "$root/tools/build.sh" "$build" flash4-bench
"$build/flash4-bench" --all --D "${FLASH4_BENCH_D:-128}" --verify "$@"
