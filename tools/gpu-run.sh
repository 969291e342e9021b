#!/usr/bin/env bash
# The one GPU job: build with ninja on all cores, run the GPU tests (and the CPU ones), then benchmark
# flash4 and its peers in the same run, writing logs and JSON into the folder given as $1 (default
# $OUT, else ./gpu-out). Prints a short table last.
#   tools/gpu-run.sh [OUT_DIR] [--quick]   --quick: tests on a reduced build, no peers
set -uo pipefail
out=${1:-${OUT:-gpu-out}}
mode=${2:-full}
mkdir -p "$out"
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build-gpu
status=0

echo "== device"; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee "$out/device.txt"

echo "== build"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release ${FLASH4_CMAKE_ARGS:-} >"$out/configure.log" 2>&1 &&
  cmake --build "$build" -j "$(nproc)" >"$out/build.log" 2>&1 || { echo "build failed"; tail -40 "$out/build.log"; exit 1; }
"$root/tools/check-spills.sh" "$out/build.log" || status=1

echo "== tests"
(cd "$build" && ctest -j "$(nproc)" --output-on-failure --timeout 600) >"$out/ctest.log" 2>&1 || status=1
grep -E "tests passed|tests failed|Failed|\*\*\*" "$out/ctest.log" | tail -30
grep -h "\[smoke\]" "$build"/Testing/Temporary/LastTest.log 2>/dev/null | head -2

if [ "$mode" = "--quick" ]; then exit $status; fi

echo "== bench"
dims=${FLASH4_BENCH_DIMS:-64,128,256}
for d in ${dims//,/ }; do
  "$build/flash4-bench" --all --json --D "$d" >"$out/flash4-d$d.jsonl" 2>>"$out/bench.err" || status=1
done
python3 "$root/bench/peers.py" --dims "$dims" >"$out/peers.jsonl" 2>"$out/peers.err" || status=1
software="$(python3 -c 'import torch,triton;print(f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, triton {triton.__version__}")'), $(nvcc --version | tail -1)"
python3 "$root/tools/merge_bench.py" "$out/bench.json" "$out"/flash4-d*.jsonl "$out/peers.jsonl" \
  --commit "${FLASH4_COMMIT:-$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)}" \
  --device "$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)" --software "$software"
exit $status
