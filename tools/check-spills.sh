#!/usr/bin/env bash
# Fails (exit 1) when a ptxas report in the given build log shows local-memory spills or a stack frame,
# naming each such kernel (demangled when c++filt is there).
# Usage: tools/check-spills.sh BUILD_LOG   (the library is compiled with -Xptxas -v)
set -euo pipefail
log=${1:?usage: check-spills.sh BUILD_LOG}
demangle=$(command -v c++filt || echo cat)
bad=$(awk '/Function properties for/ { name = $NF; next }
           /bytes stack frame/ && !/^[ \t]*0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads/ {
             sub(/^[ \t]+/, ""); print name ": " $0 }' "$log" | sort -u)
if [ -n "$bad" ]; then
  echo "check-spills: kernels with local memory:"
  echo "$bad" | while IFS= read -r line; do echo "  $(echo "${line%%:*}" | $demangle): ${line#*: }"; done
  exit 1
fi
echo "check-spills: no spills"
