#!/usr/bin/env bash
# Fails (exit 1) when a ptxas report in the given build log shows local-memory spills or a stack frame.
# Usage: tools/check-spills.sh BUILD_LOG   (the library is compiled with -Xptxas -v)
set -euo pipefail
log=${1:?usage: check-spills.sh BUILD_LOG}
bad=$(grep -E "bytes spill (stores|loads)|bytes stack frame" "$log" | grep -Ev "^\s*0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads" || true)
if [ -n "$bad" ]; then
  echo "check-spills: kernels with local memory:"
  echo "$bad" | sort | uniq -c
  exit 1
fi
echo "check-spills: no spills"
