#!/usr/bin/env bash
# For a machine where Debian's packages cannot be installed (the lent GPU machines have no registry): unpacks the
# header-only packages flash4-bench builds with (CLI11, nlohmann-json) into .deps/ (ignored by git), where
# bench/CMakeLists.txt looks after the system. Run it here, then carry .deps to that machine with the checkout
# (the device tool's `carry`). Binaries built here need neither (FLASH4_PREBUILT in tools/gpu-run.sh).
#   tools/carry-deps.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
debs=$(mktemp -d)
chmod a+rwx "$debs"  # apt downloads as its own user
trap 'rm -rf "$debs"' EXIT
(cd "$debs" && apt-get download -q libcli11-dev nlohmann-json3-dev >/dev/null)
rm -rf "$root/.deps"
for deb in "$debs"/*.deb; do dpkg -x "$deb" "$root/.deps"; done
echo "carry-deps: $(du -sh "$root/.deps" | cut -f1) in $root/.deps (CLI11, nlohmann-json); name .deps in carry"
