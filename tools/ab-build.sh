#!/usr/bin/env bash
# Builds the libraries of an A/B here, for tools/gpu-ab.sh on the H200: each NAME=REV is built from git
# revision REV (a branch, tag or commit) in a worktree of its own, bf16 only, and its flash4-bench and
# libflash4.so.0 are copied to OUT_DIR/NAME. Carry OUT_DIR to the device and run
#   FLASH4_AB_BIN_DIR=OUT_DIR FLASH4_AB_DIMS=... tools/gpu-ab.sh OUT fwd|bwd
#   tools/ab-build.sh OUT_DIR NAME=REV [NAME=REV ...]
# Environment: FLASH4_AB_HEAD_DIMS (the kernels to build, default "64;128"), FLASH4_AB_WORK (worktrees and
# build folders, default /tmp/flash4-ab; kept between runs, so a second build of a revision is incremental).
set -euo pipefail
out=${1:?usage: tools/ab-build.sh OUT_DIR NAME=REV [NAME=REV ...]}
shift
[ $# -gt 0 ] || { echo "ab-build.sh: name at least one variant as NAME=REV"; exit 64; }
root=$(cd "$(dirname "$0")/.." && pwd)
work=${FLASH4_AB_WORK:-/tmp/flash4-ab}
dims=${FLASH4_AB_HEAD_DIMS:-64;128}
mkdir -p "$out" "$work"
for variant in "$@"; do
  name=${variant%%=*}
  rev=${variant#*=}
  [ -n "$name" ] && [ "$name" != "$variant" ] || { echo "ab-build.sh: '$variant' is not NAME=REV"; exit 64; }
  tree=$work/$name
  if [ -d "$tree" ]; then
    git -C "$tree" checkout -q --detach "$rev"
  else
    git -C "$root" worktree add -q --detach "$tree" "$rev"
  fi
  echo "== $name: $(git -C "$tree" log --oneline -1)"
  cmake -S "$tree" -B "$tree/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASH4_DTYPES=bf16 \
    -DFLASH4_HEAD_DIMS="$dims" -DFLASH4_BUILD_TESTS=OFF >/dev/null
  cmake --build "$tree/build" --target flash4-bench -j "$(nproc)" >"$work/$name.log" 2>&1 ||
    { echo "ab-build.sh: $name did not build (log: $work/$name.log)"; exit 1; }
  bash "$root/tools/check-spills.sh" "$tree/build" | tail -1
  mkdir -p "$out/$name"
  cp "$tree/build/flash4-bench" "$tree/build/libflash4.so.0" "$out/$name/"
  git -C "$tree" rev-parse --short HEAD >"$out/$name/COMMIT"
done
du -sh "$out"
