#!/usr/bin/env bash
# A/B runs on the H200: libraries built elsewhere, one per subfolder of FLASH4_AB_BIN_DIR (each a flash4-bench
# and its libflash4.so.0; e.g. base and change), over flash4-bench --all's sweep (512..16K tokens, B = 16384 / N,
# H = 2048 / D, causal and not) at the head dims of FLASH4_AB_DIMS (default 64,128), two repeats, with cuDNN /
# FA2 (and fa4_cute where installed) measured in the same run. Writes $1/ab.json and $1/ab-clocks.txt (the SM
# clock and power while each variant ran).
#   tools/gpu-ab.sh OUT_DIR [fwd|bwd]
# The variants alternate within each repeat (the second in reverse order), so that they see the GPU in about
# the same state. FLASH4_AB_PEERS=0 skips the peers. FLASH4_AB_BENCH_FLAGS adds flash4-bench flags to every
# variant's sweep (e.g. --deterministic for the backward's deterministic mode).
set -uo pipefail
out=${1:-${OUT:-gpu-out}}
mode=${2:-fwd}
mkdir -p "$out"
root=$(cd "$(dirname "$0")/.." && pwd)
dims=${FLASH4_AB_DIMS:-64,128}
case $mode in fwd | bwd) ;; *) echo "gpu-ab.sh: unknown mode '$mode' (fwd or bwd)"; exit 1 ;; esac
if [ -z "${FLASH4_AB_BIN_DIR:-}" ]; then
  echo "gpu-ab.sh: set FLASH4_AB_BIN_DIR (a subfolder per variant, each a flash4-bench and its library)"
  exit 1
fi
built=()
shopt -s nullglob
for dir in "$FLASH4_AB_BIN_DIR"/*/; do
  [ -x "$dir/flash4-bench" ] && built+=("$(basename "$dir")")
done
shopt -u nullglob
[ ${#built[@]} -gt 0 ] || { echo "gpu-ab.sh: no variant with a flash4-bench in $FLASH4_AB_BIN_DIR"; exit 1; }
: >"$out/ab.jsonl"
# The SM clock and board power while a sweep runs (nvidia-smi every 50 ms), one line per variant and repeat in
# $out/ab-clocks.txt: under the backward sweeps the H200 sits at its power cap, so a variant that does more
# (or less) work per step may run at a lower (or higher) clock, which the TFLOPS alone do not show.
start_clock_samples() {
  nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv,noheader,nounits -lms 50 >"$out/clock-samples.csv" 2>/dev/null &
  clock_sampler=$!
}
stop_clock_samples() {
  kill "$clock_sampler" 2>/dev/null
  wait "$clock_sampler" 2>/dev/null
  python3 - "$1" "$out/clock-samples.csv" >>"$out/ab-clocks.txt" <<'PY'
import statistics, sys
samples = []
for line in open(sys.argv[2]):
    fields = [f.strip() for f in line.split(",")]
    try:
        samples.append((float(fields[0]), float(fields[1])))
    except (ValueError, IndexError):
        continue
# Only the busy samples: the gaps between cases (set-up, the CPU side) idle at low power and clock.
busy = [s for s in samples if samples and s[1] >= 0.5 * max(p for _, p in samples)]
if busy:
    print(f"{sys.argv[1]}: median SM clock {statistics.median(c for c, _ in busy):.0f} MHz, median power "
          f"{statistics.median(p for _, p in busy):.0f} W over {len(busy)} of {len(samples)} samples")
else:
    print(f"{sys.argv[1]}: no clock samples")
PY
  rm -f "$out/clock-samples.csv"
}
: >"$out/ab-clocks.txt"
# The whole sweep of a head dim in one process per variant and repeat: a process per shape overran 600 s.
reversed=()
for ((i = ${#built[@]} - 1; i >= 0; --i)); do reversed+=("${built[$i]}"); done
for d in ${dims//,/ }; do
  for repeat in 1 2; do
    # The second repeat runs the variants in reverse order (A B, B A), so neither always runs first.
    if [ $repeat = 1 ]; then order=("${built[@]}"); else order=("${reversed[@]}"); fi
    for variant in "${order[@]}"; do
      build=$FLASH4_AB_BIN_DIR/$variant
      tag="import json,sys; [print(json.dumps(dict(json.loads(l), variant='$variant', repeat=$repeat))) for l in sys.stdin if l.startswith('{')]"
      start_clock_samples
      LD_LIBRARY_PATH=$build timeout 120 "$build/flash4-bench" --json --all --mode "$mode" --D "$d" --flush-l2 --iters 30 \
        ${FLASH4_AB_BENCH_FLAGS:-} |
        python3 -c "$tag" >>"$out/ab.jsonl"
      stop_clock_samples "$variant D=$d repeat $repeat"
    done
  done
done
: >"$out/ab-peers.jsonl"
if [ "${FLASH4_AB_PEERS:-1}" != 0 ]; then
  python3 "$root/bench/peers.py" --dims "$dims" --modes "$mode" >"$out/ab-peers.jsonl" 2>"$out/ab-peers.err"
fi
python3 "$root/tools/merge_bench.py" "$out/ab.json" "$out/ab.jsonl" "$out/ab-peers.jsonl" \
  --commit "${FLASH4_COMMIT:-unknown}" --device "$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)" \
  --software "$(nvcc --version | tail -1)" --note "A/B ($mode): flash4 rows carry 'variant' and 'repeat'" >/dev/null
cat "$out/ab-clocks.txt"
python3 - "$out/ab.jsonl" <<'PY'
import json, sys, collections
rows = [json.loads(line) for line in open(sys.argv[1])]
table = collections.defaultdict(list)
for r in rows:
    variant = r["variant"] + ("+deterministic" if r.get("deterministic") else "")
    table[(r["N"], r["D"], r["causal"], variant)].append(r["tflops"])
print(f"{'N':>6} {'D':>4} {'causal':>6} {'variant':>24} {'TFLOPS (2 runs)':>18}")
for key in sorted(table):
    print(f"{key[0]:>6} {key[1]:>4} {str(key[2]):>6} {key[3]:>24} {' '.join(f'{v:7.1f}' for v in table[key]):>18}")
PY
