#!/usr/bin/env bash
# Configures the CMake build both README commands share and builds the given targets, quietly: a line per
# target, the compilers' warnings and errors, and the whole output in BUILD_DIR/build.log. ptxas's resource
# report lands beside each kernel object (tools/check-spills.sh reads it). Both commands configure with the same
# flags, so that running one after the other, in either order, reuses every object.
#   tools/build.sh BUILD_DIR TARGET...   (TARGET: a CMake target, or "all")
# Environment: FLASH4_CMAKE_ARGS (extra configure flags, e.g. "-DFLASH4_HEAD_DIMS=128 -DFLASH4_DTYPES=bf16"),
# FLASH4_JOBS (parallel compiles, default nproc).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:?usage: tools/build.sh BUILD_DIR TARGET...}
shift
[ $# -gt 0 ] || { echo "usage: tools/build.sh BUILD_DIR TARGET..." >&2; exit 2; }
command -v nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
command -v nvcc >/dev/null || { echo "flash4: nvcc not found (install the CUDA 13 toolkit)" >&2; exit 1; }
mkdir -p "$build"
log=$build/build.log

# Warnings are errors in this build (the CI and test build); FLASH4_CMAKE_ARGS=-DFLASH4_WERROR=OFF turns that off.
if ! cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASH4_BUILD_TESTS=ON \
     -DFLASH4_BUILD_BENCH=ON -DFLASH4_WERROR=ON ${FLASH4_CMAKE_ARGS:-} >"$log" 2>&1; then
  cat "$log"
  echo "flash4: configure failed (log: $log)" >&2
  exit 1
fi
echo "flash4: configured $build ($(grep -m1 'flash4: kernels' "$log" | sed 's/^-- flash4: //'))"

jobs=${FLASH4_JOBS:-$(nproc)}
for target in "$@"; do
  start=$(date +%s)
  # ninja --quiet drops the per-file progress lines and keeps what the compilers print.
  if ! cmake --build "$build" -j "$jobs" --target "$target" -- --quiet 2>&1 | tee -a "$log"; then
    echo "flash4: building $target failed (log: $log)" >&2
    exit 1
  fi
  echo "flash4: built $target in $(( $(date +%s) - start )) s"
done
