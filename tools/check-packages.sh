#!/usr/bin/env bash
# Checks that other projects can build against flash4, the three ways they would (tests/consumer/):
#   1. cmake --install of BUILD_DIR into a scratch prefix, then a CMake project with find_package(flash4 CONFIG)
#      and flash4::flash4 (no CUDA language, no CUDA include path);
#   2. a C program compiled with `pkg-config --cflags --libs flash4` against the same prefix;
#   3. a CMake project that add_subdirectory()s this source tree (building the library with one kernel, bf16 at
#      head dim 64, to keep the time down).
# Each consumer runs: it checks the library's version and a validation error, which need no GPU.
#   tools/check-packages.sh BUILD_DIR [SCRATCH_DIR]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:?usage: tools/check-packages.sh BUILD_DIR [SCRATCH_DIR]}" && pwd)
scratch=${2:-$(mktemp -d)}
mkdir -p "$scratch"
version=$(cat "$root/python/flash4/VERSION")
prefix=$scratch/prefix
log=$scratch/check-packages.log
: >"$log"
# Runs a step with its output in the log, shown only when it fails.
quiet() { "$@" >>"$log" 2>&1 || { tail -40 "$log"; echo "check-packages: failed: $*" >&2; exit 1; }; }

rm -rf "$prefix"
quiet cmake --install "$build" --prefix "$prefix"
for file in include/flash4/flash4.h include/flash4/flash4.hpp lib/cmake/flash4/flash4Config.cmake \
            lib/cmake/flash4/flash4ConfigVersion.cmake lib/cmake/flash4/flash4Targets.cmake lib/pkgconfig/flash4.pc \
            "lib/libflash4.so.$version"; do
  [ -e "$prefix/$file" ] || { echo "check-packages: cmake --install left no $file"; exit 1; }
done
echo "check-packages: cmake --install: the library, headers, CMake package and flash4.pc under $prefix"

quiet cmake -S "$root/tests/consumer/find-package" -B "$scratch/find-package" -G Ninja \
  -DCMAKE_PREFIX_PATH="$prefix" -DEXPECTED_VERSION="$version"
quiet cmake --build "$scratch/find-package"
"$scratch/find-package/consumer"

export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
[ "$(pkg-config --modversion flash4)" = "$version" ] ||
  { echo "check-packages: pkg-config says flash4 $(pkg-config --modversion flash4), expected $version"; exit 1; }
# shellcheck disable=SC2046  # pkg-config's flags are meant to be split
quiet cc -std=c99 -Wall -Wextra -Werror -DFLASH4_EXPECTED_VERSION="\"$version\"" "$root/tests/consumer/consumer.c" \
  -o "$scratch/pkg-config-consumer" $(pkg-config --cflags --libs flash4)
LD_LIBRARY_PATH="$(pkg-config --variable=libdir flash4)" "$scratch/pkg-config-consumer"

command -v nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
start=$(date +%s)
quiet cmake -S "$root/tests/consumer/add-subdirectory" -B "$scratch/add-subdirectory" -G Ninja \
  -DFLASH4_SOURCE_DIR="$root" -DEXPECTED_VERSION="$version" -DFLASH4_DTYPES=bf16 -DFLASH4_HEAD_DIMS=64
quiet cmake --build "$scratch/add-subdirectory"
"$scratch/add-subdirectory/consumer"
echo "check-packages: find_package, pkg-config and add_subdirectory consumers built and ran" \
     "(add_subdirectory build: $(( $(date +%s) - start )) s)"
