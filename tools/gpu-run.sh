#!/usr/bin/env bash
# The one GPU job: build with ninja on all cores, run the tests (GPU and CPU), compute-sanitizer on a small case
# of every kernel, then benchmark flash4 and its peers, forward and backward, in the
# same run. Writes few files into the folder given as $1 (default $OUT, else ./gpu-out), since the device returns at most 8:
#   build.log   device, configure, build, spill check and ptxas's report of every kernel, then the benchmarks'
#               stderr (progress lines) and notes
#   tests.log   ctest (with FLASH4_PREBUILT: the GPU test shards), then compute-sanitizer memcheck and racecheck
#   bench.json  every benchmark row (tools/merge_bench.py)
#   bench.png   TFLOPS against N, flash4 and each peer, a panel per (mode, D, causal) (tools/plot_bench.py)
#   decode.json decoding (bench/decode_bench.py): flash_attn_with_kvcache's op and its peers, eager and under a
#               CUDA graph
# plus whatever tools/gpu-python.sh writes, when it exists. Prints the tests' summary and short TFLOPS and
# decode tables last.
#   tools/gpu-run.sh [OUT_DIR] [--quick|--bench]   --quick: build and tests only; --bench: build (a no-op
#   when build-gpu is current), then benchmarks and the Python part without the tests. The two halves fit
#   the device's 10-minute limit per command where the full job may not.
# Environment: FLASH4_CMAKE_ARGS (extra configure flags), FLASH4_BENCH_DIMS (forward, default 64,96,128,192,256; empty: none),
# FLASH4_BENCH_BWD_DIMS (backward, default 64,128), FLASH4_BENCH_DETERMINISTIC=1 (the backward sweep once more in
# deterministic mode, its rows marked, for the mode's cost), FLASH4_PEERS (default sdpa_cudnn,sdpa_flash(FA2),fa4_cute), FLASH4_SANITIZE_FILTER (the sanitizer's gtest filter),
# FLASH4_SANITIZE_TOOLS (default "memcheck racecheck"; empty: none. memcheck alone took 4 minutes over the default
# filter with the full bf16 + fp16 build, so the tests and both tools need not fit one 10-minute call),
# FLASH4_BENCH_DECODE=0 (skip the decoding benchmark, a few minutes with fa4_cute installed),
# FLASH4_PYTHON=0 (skip tools/gpu-python.sh and the forward's Python-call rows, to run them as a command of their own), FLASH4_PREBUILT=DIR (no build:
# DIR holds flash4-bench, flash4_gpu_tests and libflash4.so.0 built elsewhere and carried to the device; the tests
# are then the GPU test binary alone, in FLASH4_TEST_SHARDS (default 8) parallel shards, plus pytest tests/python/gpu
# against the carried library (pytest-gpu.log, bounded by FLASH4_PYTEST_TIMEOUT_S, default 300); gpu-python.sh is skipped).
set -uo pipefail
out=${1:-${OUT:-gpu-out}}
# FlashAttention-4's CuTe package, where ../shared/tools/fa4-peer.sh installed it on this machine, joins the
# peers as fa4_cute (its package is found through a .pth file that a --target install does not process).
fa4_site=/tmp/fa4-peer/site
[ -d "$fa4_site" ] && export PYTHONPATH=$fa4_site:$fa4_site/nvidia_cutlass_dsl/dsl_packages${PYTHONPATH:+:$PYTHONPATH}
mode=${2:-full}
mkdir -p "$out"
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build-gpu
raw=$build/bench-raw  # per-benchmark JSON lines, merged into $out/bench.json
status=0

echo "== device"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee "$out/build.log"

prebuilt=${FLASH4_PREBUILT:-}
if [ -n "$prebuilt" ]; then
  prebuilt=$(cd "$prebuilt" && pwd) || { echo "FLASH4_PREBUILT: no folder $FLASH4_PREBUILT"; exit 1; }
  for binary in flash4-bench flash4_gpu_tests libflash4.so.0; do
    [ -f "$prebuilt/$binary" ] || { echo "FLASH4_PREBUILT: $prebuilt has no $binary"; exit 1; }
  done
  # The results file names the commit; the device's checkout need not be the one the binaries came from.
  [ -n "${FLASH4_COMMIT:-}" ] || { echo "FLASH4_PREBUILT needs FLASH4_COMMIT (the binaries' commit)"; exit 1; }
  export LD_LIBRARY_PATH="$prebuilt${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  bench_bin=$prebuilt/flash4-bench
  gpu_tests=$prebuilt/flash4_gpu_tests
  mkdir -p "$raw"
  echo "== prebuilt binaries from $prebuilt (no build, no spill check)" | tee -a "$out/build.log"
else
  bench_bin=$build/flash4-bench
  gpu_tests=$build/tests/flash4_gpu_tests
  echo "== build"
  { cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release ${FLASH4_CMAKE_ARGS:-} &&
    cmake --build "$build" -j "$(nproc)"; } >>"$out/build.log" 2>&1 ||
    { echo "build failed"; tail -40 "$out/build.log"; exit 1; }
  cat "$build"/CMakeFiles/flash4.dir/generated/*.ptxas.log >>"$out/build.log"
  "$root/tools/check-spills.sh" "$build" | tee -a "$out/build.log" || status=1
fi

if [ "$mode" != "--bench" ]; then
echo "== tests"
if [ -n "$prebuilt" ]; then
  # gtest's own sharding: every test runs in exactly one of the processes, which share the GPU.
  shards=${FLASH4_TEST_SHARDS:-8}
  pids=()
  # A shard is stopped after FLASH4_TEST_TIMEOUT_S (default 420): a hung kernel then shows as exit 124 and the
  # logs still come back within the device's 10-minute limit per command.
  for ((i = 0; i < shards; ++i)); do
    GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$i timeout "${FLASH4_TEST_TIMEOUT_S:-420}" "$gpu_tests" \
      >"$out/tests-shard$i.log" 2>&1 & pids+=($!)
  done
  # A shard that crashes prints no FAILED line: name it in the summary.
  crashed=""
  for ((i = 0; i < shards; ++i)); do
    wait "${pids[$i]}"
    rc=$?
    if [ $rc -ne 0 ]; then
      status=1
      grep -q '^\[  FAILED  \] .*(' "$out/tests-shard$i.log" || crashed="$crashed $i (exit $rc)"
    fi
  done
  cat "$out"/tests-shard*.log >"$out/tests.log" && rm -f "$out"/tests-shard*.log
  passed=$(awk '/^\[  PASSED  \]/{s += $4} END {print s + 0}' "$out/tests.log")
  # Each failure prints two FAILED lines (its result and the final list); the result line ends in its time.
  failed=$(grep -cE '^\[  FAILED  \] .*\([0-9]+ ms\)$' "$out/tests.log")
  skipped=$(grep -c '^\[  SKIPPED \] .*(' "$out/tests.log")
  summary="GPU tests in $shards shards: $passed passed, $failed failed, $skipped skipped${crashed:+; shards that exited without a FAILED line:$crashed}"
  grep '^\[  FAILED  \] .*(' "$out/tests.log" | head -30
else
  (cd "$build" && ctest -j "$(nproc)" --output-on-failure --timeout 600) >"$out/tests.log" 2>&1 || status=1
  summary=$(grep -E "tests passed|tests failed out of" "$out/tests.log" | tail -1)
  grep -E "Failed|\*\*\*" "$out/tests.log" | tail -30
  grep -h "\[smoke\]" "$build"/Testing/Temporary/LastTest.log 2>/dev/null | head -2
fi
echo "$summary"

# One small case of every built kernel (forward and backward at Sq=113, Sk=203, causal), the softcap
# backward kernels, the deterministic backward (its dQ turns and accumulator copies), and the forward's
# varlen epilogue, in one process per tool.
echo "== compute-sanitizer (a small case of every kernel)"
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
filter=${FLASH4_SANITIZE_FILTER:-"*ForwardGrid.MatchesReference/*_b1_sq113_sk203_h2x2_causal_*:*ForwardGrid.MatchesReference/bf16_*_b4_sq640_sk640_h12x4_causal_*:*BackwardGrid.MatchesReference/*_b1_sq113_sk203_h2x2_causal_*:*BackwardGrid.MatchesReference/*_sq333_sk333_h2x2_causal_softcap_*:*BackwardGrid.MatchesReference/*_sq257_sk257_h8x2_causal_deterministic_*:*ForwardGrid.MatchesReference/*_d128_*_causal_varlen_*:*KvcacheGrid.MatchesReference/bf16_d128_*_page64_*_splits4_*:*KvcacheBadValues*:Sm90/KvcacheHeadDims.*/bf16_d40_pad8_*:Sm90/KvcacheHeadDims.*/bf16_d192_dv128_pad24_*:Paged/ForwardGrid.MatchesReference/bf16_d128_b1_sq128_sk128_h4x2_*varlen_page48_shuffled_*:Paged/ForwardGrid.MatchesReference/bf16_d128_*badpage*:Sm90/HeadDims.*/bf16_d40_*:Sm90/HeadDims.*/bf16_d192_dv128_b1_*_causal_*:Sm90/SinksAndSeqused.MatchReference/sink_gqa_causal:Sm90/SinksAndSeqused.MatchReference/seqused_varlen_sink"}
if [ -x "$sanitizer" ]; then
  for tool in ${FLASH4_SANITIZE_TOOLS-memcheck racecheck}; do
    echo "== compute-sanitizer --tool $tool, --gtest_filter=$filter" >>"$out/tests.log"
    timeout "${FLASH4_SANITIZE_TIMEOUT_S:-240}" "$sanitizer" --tool "$tool" --error-exitcode 99 "$gpu_tests" \
      --gtest_filter="$filter" >>"$out/tests.log" 2>&1
    rc=$?
    [ $rc -eq 0 ] || status=1
    echo "$tool: exit $rc; $(grep -E "ERROR SUMMARY|RACECHECK SUMMARY|tests? from .* ran|SKIPPED \]|PASSED \]|FAILED \]" \
      "$out/tests.log" | tail -3 | tr '\n' ' ')"
  done
else
  echo "compute-sanitizer not found" | tee -a "$out/tests.log"
fi

# The soak (issue 28): random valid problems, forward and backward, against the fp64 reference; then
# memcheck on a sample of them.
soak_bin=${prebuilt:+$prebuilt/flash4_soak}
soak_bin=${soak_bin:-$build/tests/soak/flash4_soak}
if [ -x "$soak_bin" ] && [ "${FLASH4_SOAK_PROBLEMS:-10000}" != 0 ]; then
  echo "== soak"
  seed=${FLASH4_SOAK_SEED:-$(date +%s)}
  timeout 300 "$soak_bin" --problems "${FLASH4_SOAK_PROBLEMS:-10000}" --seed "$seed" --json "$out/soak.json" \
    >"$out/soak.log" 2>&1 || status=1
  echo "soak (seed $seed): $(tail -1 "$out/soak.log")"
  if [ -x "$sanitizer" ]; then
    "$sanitizer" --tool memcheck --error-exitcode 99 "$soak_bin" --sample --seed "$seed" --json "$out/soak-sample.json" \
      >>"$out/soak.log" 2>&1 || status=1
    echo "soak sample under memcheck: $(grep -E "ERROR SUMMARY" "$out/soak.log" | tail -1)"
  fi
fi
if [ -n "$prebuilt" ]; then
  # The Python package's GPU tests against the carried library (a build of its own runs them in gpu-python.sh).
  echo "== pytest tests/python/gpu"
  FLASH4_LIBRARY=$prebuilt/libflash4.so.0 PYTHONPATH=$root/python PYTHONFAULTHANDLER=1 \
    timeout --signal=INT --kill-after=20 "${FLASH4_PYTEST_TIMEOUT_S:-300}" python3 -m pytest -q -rfEs \
    -p no:cacheprovider "$root/tests/python/gpu" >"$out/pytest-gpu.log" 2>&1 || status=1
  echo "pytest (GPU): $(grep -E '^=+ .*(passed|failed|error).* =+$' "$out/pytest-gpu.log" | tail -1)"
fi
fi  # tests

if [ "$mode" = "--quick" ]; then exit $status; fi

echo "== bench"
mkdir -p "$raw" && rm -f "$raw"/*.jsonl "$raw/decode.txt"  # nothing of an earlier run is reported
dims=${FLASH4_BENCH_DIMS-64,96,128,192,256}
bwd_dims=${FLASH4_BENCH_BWD_DIMS-64,128}
bench_log=$out/build.log  # one file fewer: the device returns at most 8, and gpu-python.sh writes 4
echo "== bench" >>"$bench_log"
for d in ${dims//,/ }; do
  "$bench_bin" --all --json --flush-l2 --D "$d" >"$raw/flash4-fwd-d$d.jsonl" 2>>"$bench_log" || status=1
done
for d in ${bwd_dims//,/ }; do
  "$bench_bin" --all --json --mode bwd --flush-l2 --D "$d" >"$raw/flash4-bwd-d$d.jsonl" 2>>"$bench_log"
  rc=$?
  # Exit status 2 (NOT_IMPLEMENTED) is kept for libraries without a backward; the current one never answers it.
  if [ $rc -eq 2 ]; then echo "flash4 bwd D=$d: not implemented in this build" | tee -a "$bench_log"
  elif [ $rc -ne 0 ]; then status=1; fi
  if [ "${FLASH4_BENCH_DETERMINISTIC:-0}" = 1 ]; then
    "$bench_bin" --all --json --mode bwd --deterministic --flush-l2 --D "$d" \
      >"$raw/flash4-bwd-det-d$d.jsonl" 2>>"$bench_log" || status=1
  fi
done
echo "== peers" >>"$bench_log"
peers=${FLASH4_PEERS:-sdpa_cudnn,sdpa_flash(FA2),fa4_cute}
[ -z "$dims" ] || python3 "$root/bench/peers.py" --dims "$dims" --modes fwd --providers "$peers" >"$raw/peers-fwd.jsonl" \
  2>>"$bench_log" || status=1
[ -z "$bwd_dims" ] || python3 "$root/bench/peers.py" --dims "$bwd_dims" --modes bwd --providers "$peers" \
  >"$raw/peers-bwd.jsonl" 2>>"$bench_log" || status=1
# The forward as a user calls it: flash4.flash_attn_func from Python, timed like the peers (the kernel alone
# is flash4-bench's row).
library=${prebuilt:+$prebuilt/libflash4.so.0}
if [ -n "$dims" ] && [ "${FLASH4_PYTHON:-1}" != 0 ]; then
  FLASH4_LIBRARY=${library:-$build/libflash4.so} python3 "$root/bench/peers.py" --dims "$dims" --modes fwd \
    --providers flash4 2>>"$bench_log" | sed 's/"provider": "flash4"/"provider": "flash4_python"/' \
    >"$raw/flash4-python-fwd.jsonl" || status=1
fi
software="$(python3 -c 'import torch,triton;print(f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, triton {triton.__version__}")'), $(nvcc --version | tail -1)"
python3 "$root/tools/merge_bench.py" "$out/bench.json" "$raw"/*.jsonl \
  --commit "${FLASH4_COMMIT:-$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)}" \
  --device "$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)" --software "$software" \
  --method "flash4: flash4-bench --flush-l2, median of per-launch CUDA event pairs after warm-up, a 256 MB buffer zeroed before each launch; peers: bench/peers.py, triton do_bench median (the same zeroing); same machine, same run" \
  >"$raw/table.txt" 2>>"$bench_log" || status=1
python3 "$root/tools/plot_bench.py" "$out/bench.json" >>"$bench_log" 2>&1 || { echo "bench plot failed (build.log)"; status=1; }

# Decoding (issue 30): flash_attn_with_kvcache's op against SDPA's backends and fa4_cute, eager and replayed
# from a CUDA graph, into decode.json (its summary table goes to the log and, at the end, to stdout).
if [ "${FLASH4_BENCH_DECODE:-1}" != 0 ]; then
  echo "== decode" | tee -a "$bench_log"
  FLASH4_LIBRARY=${library:-$build/libflash4.so} python3 "$root/bench/decode_bench.py" --out "$out/decode.json" \
    >"$raw/decode.txt" 2>>"$bench_log" || status=1
  cat "$raw/decode.txt" >>"$bench_log"
fi

if [ -f "$root/tools/gpu-python.sh" ] && [ "${FLASH4_PYTHON:-1}" != 0 ] && [ -z "$prebuilt" ]; then
  echo "== python"
  bash "$root/tools/gpu-python.sh" "$out" "$build" || status=1
fi

echo "== summary"
[ "$mode" = "--bench" ] || echo "tests: $summary"
cat "$raw/table.txt"
[ ! -f "$raw/decode.txt" ] || sed -n '/^decode_bench: /,$p' "$raw/decode.txt"
exit $status
