#!/usr/bin/env bash
# Nsight Compute profile of the main backward kernel on the H200: one launch per head dim (bf16, N tokens
# per sequence, B = 16384 / N, H = 2048 / D), the speed-of-light, warp-state and memory sections plus
# per-instruction stall sampling. Writes $1/profile-d<D>.txt (the details page) and $1/stalls-d<D>.csv
# (the SASS source page: one row per instruction with its stall samples) and $1/stalls-summary-d<D>.txt
# (tools/ncu_stalls.py over the consumers' main loop).
#   [FLASH4_PROFILE_N=4096] [FLASH4_PROFILE_CAUSAL=0] tools/gpu-profile-bwd.sh OUT_DIR [BUILD_DIR] [DIMS]
#   (defaults: $OUT, build-gpu, 64,128; BUILD_DIR may be a folder of prebuilt binaries, such as
#   build-slim/final, with LD_LIBRARY_PATH pointing at it)
set -uo pipefail
out=${1:-${OUT:-gpu-out}}
root=$(cd "$(dirname "$0")/.." && pwd)
build=${2:-$root/build-gpu}
dims=${3:-64,128}
seqlen=${FLASH4_PROFILE_N:-4096}
causal=${FLASH4_PROFILE_CAUSAL:-0}
mkdir -p "$out"
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
for d in ${dims//,/ }; do
  report=$out/bwd-d$d
  "$ncu" --kernel-name regex:bwd_kernel --launch-skip 2 --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis \
    --section ComputeWorkloadAnalysis --section SourceCounters --section LaunchStats --section Occupancy \
    --import-source no -f -o "$report" \
    "$build/flash4-bench" --mode bwd --D "$d" --N "$seqlen" --causal "$causal" --iters 3 --warmup 1 >"$out/ncu-d$d.log" 2>&1 ||
    { echo "ncu D=$d failed"; tail -20 "$out/ncu-d$d.log"; continue; }
  "$ncu" --import "$report.ncu-rep" --page details >"$out/profile-d$d.txt" 2>&1
  "$ncu" --import "$report.ncu-rep" --page source --print-source sass --csv >"$out/stalls-d$d.csv" 2>&1
  rm -f "$report.ncu-rep"
  # The consumers' main loop (bracketed by their wgmma issues): stall reasons and the costliest instructions.
  python3 "$root/tools/ncu_stalls.py" "$out/stalls-d$d.csv" --loop-of HGMMA --top 20 >"$out/stalls-summary-d$d.txt" 2>&1
  echo "== D=$d"
  grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|Warp Cycles Per Issued|Issued Ipc|L2 Cache Throughput" \
    "$out/profile-d$d.txt" | head -12
done
