#!/usr/bin/env bash
# The Python part of the GPU job (tools/gpu-run.sh calls it after its own build, tests and benchmarks):
#   tools/gpu-python.sh OUT_DIR BUILD_DIR
# Uses the libflash4.so in BUILD_DIR through FLASH4_LIBRARY and the package from this checkout's python/
# (no pip install: that would build the kernels a second time). Then, in about 5 minutes on an H200:
#   1. pytest tests/python, GPU tests included (CPU tests run in a second process, so that a crash in one
#      half cannot hide the other's results); Python's faulthandler prints every thread's stack on a crash;
#   2. python -m flash4.bench: flash4 vs SDPA cuDNN / flash and FlexAttention, fwd + bwd, the anchors' shapes;
#   3. examples/train_gpt_block.py: flash4 vs SDPA training curves.
# The device returns few files, and gpu-run.sh writes four of its own, so this writes four:
#   python.log         pytest, bench progress and training output, then the training JSON (between
#                      "== train_gpt_block.json" and "== end train_gpt_block.json")
#   python-bench.json  bench rows in the anchors' format      python-bench.png   TFLOPS vs N per case
#   train_gpt_block.png  the loss curves
# Environment: FLASH4_PY_BENCH_BUDGET_S (bench time budget, default 170), FLASH4_PY_TRAIN_STEPS (default 300),
# FLASH4_PY_BENCH_ARGS (extra arguments for python -m flash4.bench).
set -uo pipefail
out=${1:?usage: tools/gpu-python.sh OUT_DIR BUILD_DIR}
build=${2:?usage: tools/gpu-python.sh OUT_DIR BUILD_DIR}
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
out=$(cd "$out" && pwd)
log=$out/python.log
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
status=0

export FLASH4_LIBRARY=$build/libflash4.so
export PYTHONPATH=$root/python${PYTHONPATH:+:$PYTHONPATH}
export PYTHONFAULTHANDLER=1 PYTHONUNBUFFERED=1
: >"$log"
note() { echo "$*" | tee -a "$log"; }

if [ ! -f "$FLASH4_LIBRARY" ]; then
  note "python: $FLASH4_LIBRARY does not exist (build the library first); nothing run"
  exit 1
fi
note "== python: $(python3 -c 'import sys, torch; print(f"Python {sys.version.split()[0]}, torch {torch.__version__}")'), library $FLASH4_LIBRARY"

# One pytest process per half, each bounded so a hang cannot eat the job's time.
run_pytest() {  # name, timeout (s), pytest arguments...
  local name=$1 limit=$2
  shift 2
  note "== pytest ($name)"
  (cd "$root" && timeout --signal=INT --kill-after=20 "$limit" python3 -m pytest -v -rfEs -p no:cacheprovider \
    -o faulthandler_timeout=120 "$@") >>"$log" 2>&1
  local rc=$?
  case $rc in
    0) ;;
    124|137) note "pytest ($name): stopped after ${limit} s"; status=1 ;;
    139|134) note "pytest ($name): the process crashed (exit $rc); faulthandler's stacks are in the log above"; status=1 ;;
    *) status=1 ;;
  esac
  grep -E "^(=+ .*(passed|failed|skipped|error).* =+)$" "$log" | tail -1 | sed "s/^/pytest ($name): /"
}
run_pytest gpu 200 tests/python/gpu
run_pytest cpu 100 tests/python --ignore=tests/python/gpu

note "== python -m flash4.bench"
# Shorter timing spans than the default (25 + 100 ms per measurement) keep the sweep inside the job's time;
# a budget stops it cleanly if compiles run long (the rest is listed under meta.skipped).
(cd "$root" && python3 -m flash4.bench --out "$out/python-bench.json" --warmup-ms 25 --repeat-ms 100 \
  --time-budget-s "${FLASH4_PY_BENCH_BUDGET_S:-170}" ${FLASH4_PY_BENCH_ARGS:-}) >>"$log" 2>"$scratch/bench.err" || status=1
# tqdm redraws its bar with carriage returns: keep the last state of each line, and every other message.
tr '\r' '\n' <"$scratch/bench.err" | grep -v -E "^ *[0-9]+%\|" >>"$log"
tail -c 4000 "$scratch/bench.err" | tr '\r' '\n' | grep -E "[0-9]+/[0-9]+ \[" | tail -1 >>"$log"
if [ -f "$out/python-bench.json" ]; then
  python3 - "$out/python-bench.json" <<'EOF' | tee -a "$log"
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
table = {}
for r in rows:
    table.setdefault((r["mode"], r["D"], r["causal"], r["N"]), {})[r["provider"]] = r["tflops"]
names = ["flash4", "sdpa_cudnn", "sdpa_flash(FA2)", "flex_attention"]
print(f"{'mode':4} {'D':>4} {'causal':>6} {'N':>6} " + " ".join(f"{n:>15}" for n in names))
for key in sorted(table):
    print(f"{key[0]:4} {key[1]:>4} {str(key[2]):>6} {key[3]:>6} " + " ".join(f"{table[key].get(n, '-'):>15}" for n in names))
EOF
fi

note "== examples/train_gpt_block.py"
(cd "$root" && timeout --kill-after=20 120 python3 examples/train_gpt_block.py --steps "${FLASH4_PY_TRAIN_STEPS:-300}" \
  --out "$out/train_gpt_block.png" --json "$scratch/train_gpt_block.json") >>"$log" 2>&1 || status=1
if [ -f "$scratch/train_gpt_block.json" ]; then
  { echo "== train_gpt_block.json"; cat "$scratch/train_gpt_block.json"; echo; echo "== end train_gpt_block.json"; } >>"$log"
fi
grep -E "MATCH|skipped: flash4 has no backward" "$log" | tail -1

exit $status
