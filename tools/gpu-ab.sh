#!/usr/bin/env bash
# A/B runs on the H200, bf16 at head dims 64 and 128, with cuDNN / FA2 / Flex measured in the same run.
# Writes $1/ab.json (and, for the change mode, $1/ab-clocks.txt: the SM clock and power while each variant
# ran).
#   tools/gpu-ab.sh OUT_DIR [fwd|change]
#   fwd (default): the FA4 pieces of the forward, four builds (all on; software exp2 off; lazy rescaling
#                  off; longest-first order off), 16K tokens (B=1, H=2048/D), causal and not, two repeats;
#   change:        libraries built elsewhere, one per subfolder of FLASH4_AB_BIN_DIR (required; e.g. base
#                  and change), the backward over flash4-bench --all's sweep (512..16K tokens, B = 16384 / N),
#                  two repeats: a change's effect against the commit before it. The variants alternate
#                  within each repeat (the second in reverse order), so that they see the GPU in about the
#                  same state.
# FLASH4_AB_PEERS=0 skips the peers. FLASH4_AB_BIN_DIR=DIR skips the builds: DIR/<variant>/ holds a
# flash4-bench and its libflash4.so.0 built elsewhere (variants: all_on, no_soft_exp2, no_lazy_rescale,
# no_lpt_order; change: any).
set -uo pipefail
out=${1:-${OUT:-gpu-out}}
mode=${2:-fwd}
mkdir -p "$out"
root=$(cd "$(dirname "$0")/.." && pwd)
seqlens="16384"
sweep=0  # change: the backward over flash4-bench --all's sweep
if [ "$mode" = change ]; then
  sweep=1
  if [ -z "${FLASH4_AB_BIN_DIR:-}" ]; then
    echo "gpu-ab.sh change: set FLASH4_AB_BIN_DIR (a subfolder per variant, each a flash4-bench and its library)"
    exit 1
  fi
  declare -A variants=()
  shopt -s nullglob
  for dir in "$FLASH4_AB_BIN_DIR"/*/; do variants[$(basename "$dir")]=""; done
  shopt -u nullglob
  [ ${#variants[@]} -gt 0 ] || { echo "gpu-ab.sh change: no variant folders in $FLASH4_AB_BIN_DIR"; exit 1; }
  seqlens="512 1024 2048 4096 8192 16384"  # flash4-bench --all's lengths
elif [ "$mode" = fwd ]; then
  declare -A variants=([all_on]="" [no_soft_exp2]="-DFLASH4_SOFT_EXP2=OFF" [no_lazy_rescale]="-DFLASH4_LAZY_RESCALE=OFF"
                       [no_lpt_order]="-DFLASH4_LPT_ORDER=OFF")
  timings=("--mode fwd")
else
  echo "gpu-ab.sh: unknown mode '$mode' (fwd or change)"
  exit 1
fi
: >"$out/ab.jsonl"
bench_dir() { if [ -n "${FLASH4_AB_BIN_DIR:-}" ]; then echo "$FLASH4_AB_BIN_DIR/$1"; else echo "$root/build-ab-$1"; fi; }
built=()  # the variants with a bench to time (a failed build leaves out its variant, not an older binary)
# In name order, so that the first variant of each repeat does not depend on bash's hashing.
mapfile -t variant_names < <(printf '%s\n' "${!variants[@]}" | sort)
for variant in "${variant_names[@]}"; do
  build=$(bench_dir "$variant")
  if [ -z "${FLASH4_AB_BIN_DIR:-}" ]; then
    { cmake -S "$root" -B "$build" -G Ninja -DFLASH4_BUILD_TESTS=OFF -DFLASH4_DTYPES=bf16 "-DFLASH4_HEAD_DIMS=64;128" \
        ${variants[$variant]} >"$out/ab-configure.log" 2>&1 &&
      cmake --build "$build" -j "$(nproc)" --target flash4-bench >"$out/ab-build-$variant.log" 2>&1; } ||
      { echo "build $variant failed"; tail -20 "$out/ab-build-$variant.log"; continue; }
  fi
  [ -x "$build/flash4-bench" ] || { echo "$variant: no flash4-bench in $build"; continue; }
  built+=("$variant")
  [ $sweep = 1 ] && continue  # timed below, the variants alternating
  tag="import json,sys; [print(json.dumps(dict(json.loads(l), variant='$variant', repeat=REPEAT))) for l in sys.stdin if l.startswith('{')]"
  for d in 64 128; do
    for causal in 0 1; do
      for timing in "${timings[@]}"; do
        for repeat in 1 2; do
          # shellcheck disable=SC2086  # $timing is a list of flags
          LD_LIBRARY_PATH=$build "$build/flash4-bench" --json --D "$d" --N 16384 --B 1 --H $((2048 / d)) --causal "$causal" --iters 50 $timing |
            python3 -c "${tag/REPEAT/$repeat}" >>"$out/ab.jsonl"
        done
      done
    done
  done
done
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
if [ $sweep = 1 ]; then  # the whole sweep in one process per variant and repeat: a process per shape overran 600 s
  reversed=()
  for ((i = ${#built[@]} - 1; i >= 0; --i)); do reversed+=("${built[$i]}"); done
  for repeat in 1 2; do
    # The second repeat runs the variants in reverse order (A B, B A), so neither always runs first.
    if [ $repeat = 1 ]; then order=("${built[@]}"); else order=("${reversed[@]}"); fi
    for variant in "${order[@]}"; do
      build=$(bench_dir "$variant")
      tag="import json,sys; [print(json.dumps(dict(json.loads(l), variant='$variant', repeat=$repeat))) for l in sys.stdin if l.startswith('{')]"
      start_clock_samples
      LD_LIBRARY_PATH=$build "$build/flash4-bench" --json --all --mode bwd --iters 30 | python3 -c "$tag" >>"$out/ab.jsonl"
      stop_clock_samples "$variant repeat $repeat"
    done
  done
fi
peer_mode=$mode
[ $sweep = 1 ] && peer_mode=bwd
: >"$out/ab-peers.jsonl"
if [ "${FLASH4_AB_PEERS:-1}" != 0 ]; then
  python3 "$root/bench/peers.py" --dims 64,128 --seqlens "${seqlens// /,}" --modes "$peer_mode" >"$out/ab-peers.jsonl" 2>"$out/ab-peers.err"
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
