#!/usr/bin/env bash
# Fails (exit 1) when ptxas's resource report shows a kernel with local-memory spills or a stack frame, naming
# each such kernel (demangled when c++filt is there).
# Usage: tools/check-spills.sh BUILD_DIR|LOG...
#   BUILD_DIR: a CMake build of the library. Its CUDA objects each have the report of their compile in
#              <object>.ptxas.log (cmake/ptxas-report.sh); flash4-objects.txt lists the library's objects, so
#              a report left by a kernel no longer in the build is not read, and a missing one is an error.
#   LOG:       any file holding ptxas -v output (a build log of nvcc -Xptxas=-v).
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: check-spills.sh BUILD_DIR|LOG..." >&2; exit 2; }
reports=()
for source in "$@"; do
  if [ -d "$source" ]; then
    list=$source/flash4-objects.txt
    [ -f "$list" ] || { echo "check-spills: $list is missing: configure the build first" >&2; exit 2; }
    while IFS= read -r object; do
      case "$object" in *.cu.o) ;; *) continue ;; esac
      [ -f "$object.ptxas.log" ] || { echo "check-spills: no ptxas report for $object: build it first" >&2; exit 2; }
      reports+=("$object.ptxas.log")
    done <"$list"
  else
    reports+=("$source")
  fi
done
[ ${#reports[@]} -gt 0 ] || { echo "check-spills: no CUDA object in $*" >&2; exit 2; }
if ! grep -qh "Function properties for" "${reports[@]}"; then
  echo "check-spills: no kernel in the ptxas reports of $* (was the library compiled with -Xptxas=-v?)" >&2
  exit 2
fi
demangle=$(command -v c++filt || echo cat)
bad=$(awk '/Function properties for/ { name = $NF; next }
           /bytes stack frame/ && !/^[ \t]*0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads/ {
             sub(/^[ \t]+/, ""); print name ": " $0 }' "${reports[@]}" | sort -u)
if [ -n "$bad" ]; then
  echo "check-spills: kernels with local memory:"
  echo "$bad" | while IFS= read -r line; do echo "  $(echo "${line%%:*}" | $demangle): ${line#*: }"; done
  exit 1
fi
functions=$(cat "${reports[@]}" | grep -c "Function properties for")
echo "check-spills: no spills ($functions functions in ${#reports[@]} ptxas reports)"
