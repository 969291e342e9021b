#!/usr/bin/env bash
# The contract fuzz test in CI (.ci/run): the validator and the host planners built with AddressSanitizer and
# UndefinedBehaviorSanitizer (every report fatal), then
#   1. the contract tests (oracle, issue-28 findings),
#   2. flash4_fuzz: the seed cases and FLASH4_FUZZ_CALLS (default 10^6) random params structs, each checked
#      against the oracle restating flash4.h's rules (tests/contract/),
#   3. with clang: libFuzzer from the seed corpus for FLASH4_FUZZ_RUNS (default 10^6) more inputs.
# Host code only (no kernel is compiled), so it needs no GPU. Uses clang where installed, else g++.
#   tools/fuzz-ci.sh [BUILD_DIR]      (default build-fuzz)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build-fuzz}
calls=${FLASH4_FUZZ_CALLS:-1000000}
runs=${FLASH4_FUZZ_RUNS:-1000000}

# clang and its runtimes (libFuzzer, sanitizers) from Debian's packages.
need_apt=()
for package in clang libclang-rt-14-dev; do
  dpkg -s "$package" >/dev/null 2>&1 || need_apt+=("$package")
done
if [ ${#need_apt[@]} -gt 0 ] && command -v apt-get >/dev/null; then
  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need_apt[@]}" || true
fi
cxx=$(command -v clang++ || command -v g++)

sanitize="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
start=$(date +%s)
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER="$cxx" \
  -DCMAKE_CXX_FLAGS="$sanitize" -DCMAKE_EXE_LINKER_FLAGS="$sanitize" \
  -DFLASH4_HEAD_DIMS=64 -DFLASH4_DTYPES=bf16 -DFLASH4_BUILD_BENCH=OFF >/dev/null
targets=(flash4_contract_tests flash4_fuzz)
[[ "$cxx" == *clang* ]] && targets+=(flash4_contract_libfuzzer)
cmake --build "$build" -j "$(nproc)" --target "${targets[@]}"
echo "fuzz-ci: built with $cxx and ASan + UBSan in $(( $(date +%s) - start )) s"

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
"$build/tests/contract/flash4_contract_tests" --gtest_brief=1
start=$(date +%s)
"$build/tests/contract/flash4_fuzz" --calls "$calls" --seed "${FLASH4_FUZZ_SEED:-$(date +%s)}"
echo "fuzz-ci: flash4_fuzz took $(( $(date +%s) - start )) s"
if [[ "$cxx" == *clang* ]]; then
  corpus=$(mktemp -d)
  "$build/tests/contract/flash4_fuzz" --write-corpus "$corpus"
  "$build/tests/contract/flash4_contract_libfuzzer" "$corpus" -runs="$runs" -print_final_stats=1 2>&1 | tail -n 12
  rm -rf "$corpus"
fi
