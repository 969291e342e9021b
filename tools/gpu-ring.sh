#!/usr/bin/env bash
# Ring attention on several GPUs of one host (issue 7): builds libflash4.so (bf16, head dims 64 and 128), runs
# the multi-GPU correctness check (tests/python/gpu/dist_ring_check.py) and the 1-vs-W GPU benchmark
# (bench/ring_bench.py) under torchrun, with NVLink multicast off, writing logs and JSON into $1 (default $OUT,
# else ./gpu-out). Six files, within the device's eight: device.txt, ring-build.log, ring-cpu-tests.log,
# ring-check.log, ring-bench.log, ring-bench.json. Not yet run on GPUs: its duration is unmeasured.
#   tools/gpu-ring.sh [OUT_DIR] [--check-only]      FLASH4_RING_GPUS=W (default 2)
set -uo pipefail
out=${1:-${OUT:-gpu-out}}
mode=${2:-full}
mkdir -p "$out"
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build-ring
gpus=${FLASH4_RING_GPUS:-2}
status=0

# NVLink multicast (NVLS) stays off in every multi-GPU run.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
export FLASH4_LIBRARY=$build/libflash4.so PYTHONPATH=$root/python${PYTHONPATH:+:$PYTHONPATH}
export FLASH4_COMMIT=${FLASH4_COMMIT:-$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)}

echo "== device"; nvidia-smi --query-gpu=index,name,driver_version --format=csv | tee "$out/device.txt"
have=$(nvidia-smi -L | wc -l)
if [ "$have" -lt "$gpus" ]; then echo "need $gpus GPUs, found $have"; exit 1; fi
nvidia-smi topo -m >>"$out/device.txt" 2>&1

echo "== build"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASH4_BUILD_TESTS=OFF -DFLASH4_BUILD_BENCH=OFF \
  -DFLASH4_DTYPES=bf16 "-DFLASH4_HEAD_DIMS=64;128" >"$out/ring-build.log" 2>&1 &&
  cmake --build "$build" -j "$(nproc)" >>"$out/ring-build.log" 2>&1 || { echo "build failed"; tail -40 "$out/ring-build.log"; exit 1; }

echo "== CPU tests of flash4.distributed"
python3 -m pytest -q -p no:cacheprovider "$root/tests/python/test_distributed_cpu.py" >"$out/ring-cpu-tests.log" 2>&1 || status=1
tail -1 "$out/ring-cpu-tests.log"

echo "== $gpus-GPU check"
torchrun --standalone --nproc-per-node "$gpus" "$root/tests/python/gpu/dist_ring_check.py" >"$out/ring-check.log" 2>&1 || status=1
grep -E "FAIL|SKIP|dist_ring_check|Error" "$out/ring-check.log" | head -40

if [ "$mode" = "--check-only" ]; then exit $status; fi

echo "== bench 1 vs $gpus GPUs"
torchrun --standalone --nproc-per-node "$gpus" "$root/bench/ring_bench.py" --out "$out/ring-bench.json" \
  >"$out/ring-bench.log" 2>&1 || status=1
grep -E "speedup|wrote|Error" "$out/ring-bench.log"
exit $status
