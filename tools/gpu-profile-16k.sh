#!/usr/bin/env bash
# Nsight Compute of flash4's main kernel and its peers' at the anchors' 16K shape (B = 1, H = 2048 / D), every
# head dim of FLASH4_PROFILE_DIMS (default 64,96,128,192,256), causal and not: the sections that say what
# limits a kernel (speed of light, pipes, warp states, scheduler, occupancy, instructions) plus the pipe
# metrics. Writes $1/ncu-MODE-flash4-d<D>-c<0|1>.txt, one per cell, and $1/ncu-MODE-peers.txt (every peer
# kernel launched in bench/profile_peers.py's NVTX ranges, cells in its printed order).
#   tools/gpu-profile-16k.sh OUT_DIR [fwd|bwd] [BUILD_DIR]   (BUILD_DIR: build-gpu, or a folder of prebuilt
#   binaries with LD_LIBRARY_PATH pointing at it; fa4_cute joins where ../shared/tools/fa4-peer.sh installed it)
set -uo pipefail
out=${1:-${OUT:-gpu-out}}
mode=${2:-fwd}
root=$(cd "$(dirname "$0")/.." && pwd)
build=${3:-$root/build-gpu}
dims=${FLASH4_PROFILE_DIMS:-64,96,128,192,256}
case $mode in fwd | bwd) ;; *) echo "gpu-profile-16k.sh: unknown mode '$mode' (fwd or bwd)"; exit 1 ;; esac
mkdir -p "$out"
fa4_site=/tmp/fa4-peer/site
[ -d "$fa4_site" ] && export PYTHONPATH=$fa4_site:$fa4_site/nvidia_cutlass_dsl/dsl_packages${PYTHONPATH:+:$PYTHONPATH}
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
sections=(--section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis
          --section Occupancy --section LaunchStats --section SchedulerStats --section WarpStateStats
          --section InstructionStats)
metrics=sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_shared_cycles_active.avg.pct_of_peak_sustained_active
status=0
for d in ${dims//,/ }; do
  for causal in 0 1; do
    report=$out/ncu-$mode-flash4-d$d-c$causal.txt
    # The third launch: past the warm-up, with the library's caches filled.
    timeout 120 "$ncu" --kernel-name "regex:${mode}_kernel" --launch-skip 2 --launch-count 1 "${sections[@]}" \
      --metrics "$metrics" "$build/flash4-bench" --mode "$mode" --D "$d" --N 16384 --causal "$causal" \
      --warmup 1 --iters 2 >"$report" 2>&1 || { echo "ncu flash4 $mode D=$d causal=$causal failed"; status=1; }
    echo "flash4 $mode D=$d causal=$causal: $(grep -E '^ +Duration ' "$report" | head -1 | tr -s ' ')"
  done
done
peers=$out/ncu-$mode-peers.txt
timeout 300 "$ncu" --nvtx --nvtx-include "prof/" "${sections[@]}" --metrics "$metrics" \
  python3 "$root/bench/profile_peers.py" --mode "$mode" --dims "$dims" >"$peers" 2>&1 ||
  { echo "ncu peers $mode failed"; status=1; }
echo "peers $mode: $(grep -c '^cell ' "$peers") cells, $(grep -cE '^ +Duration ' "$peers") kernels profiled"
exit $status
