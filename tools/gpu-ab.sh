#!/usr/bin/env bash
# A/B of the FA4 pieces on the H200: builds the forward four times (all on; software exp2 off; lazy
# rescaling off; longest-first order off), bf16 at head dims 64 and 128, and times each at 16K tokens
# (B=1, H=2048/D), causal and not, with cuDNN measured in the same run. Writes $1/ab.json.
set -uo pipefail
out=${1:-${OUT:-gpu-out}}
mkdir -p "$out"
root=$(cd "$(dirname "$0")/.." && pwd)
declare -A variants=([all_on]="" [no_soft_exp2]="-DFLASH4_SOFT_EXP2=OFF" [no_lazy_rescale]="-DFLASH4_LAZY_RESCALE=OFF"
                     [no_lpt_order]="-DFLASH4_LPT_ORDER=OFF")
: >"$out/ab.jsonl"
for variant in "${!variants[@]}"; do
  build=$root/build-ab-$variant
  cmake -S "$root" -B "$build" -G Ninja -DFLASH4_BUILD_TESTS=OFF -DFLASH4_DTYPES=bf16 "-DFLASH4_HEAD_DIMS=64;128" \
    ${variants[$variant]} >"$out/ab-configure.log" 2>&1 && cmake --build "$build" -j "$(nproc)" --target flash4-bench >"$out/ab-build-$variant.log" 2>&1 ||
    { echo "build $variant failed"; tail -20 "$out/ab-build-$variant.log"; continue; }
  for d in 64 128; do
    for causal in 0 1; do
      for repeat in 1 2; do
        "$build/flash4-bench" --json --D "$d" --N 16384 --B 1 --H $((2048 / d)) --causal "$causal" --iters 50 |
          python3 -c "import json,sys; [print(json.dumps(dict(json.loads(l), variant='$variant', repeat=$repeat))) for l in sys.stdin if l.startswith('{')]" >>"$out/ab.jsonl"
      done
    done
  done
done
python3 "$root/bench/peers.py" --dims 64,128 --seqlens 16384 >"$out/ab-peers.jsonl" 2>"$out/ab-peers.err"
python3 "$root/tools/merge_bench.py" "$out/ab.json" "$out/ab.jsonl" "$out/ab-peers.jsonl" \
  --commit "${FLASH4_COMMIT:-unknown}" --device "$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)" \
  --software "$(nvcc --version | tail -1)" --note "A/B of the FA4 pieces: flash4 rows carry 'variant' and 'repeat'" >/dev/null
python3 - "$out/ab.jsonl" <<'PY'
import json, sys, collections
rows = [json.loads(line) for line in open(sys.argv[1])]
table = collections.defaultdict(list)
for r in rows:
    table[(r["D"], r["causal"], r["variant"])].append(r["tflops"])
print(f"{'D':>4} {'causal':>6} {'variant':>16} {'TFLOPS (2 runs)':>18}")
for key in sorted(table):
    print(f"{key[0]:>4} {str(key[1]):>6} {key[2]:>16} {' '.join(f'{v:7.1f}' for v in table[key]):>18}")
PY
