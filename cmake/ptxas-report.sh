#!/usr/bin/env bash
# CMake's compiler launcher for the library's CUDA sources: runs the compile command it is given and sends
# ptxas's resource report (the "ptxas info" lines of -Xptxas=-v and their stack-frame / spill lines) to
# <object>.ptxas.log, so that a build prints a line per file instead of thousands of report lines. Everything
# else nvcc prints (warnings, errors) still reaches the terminal. tools/check-spills.sh reads the logs.
#   ptxas-report.sh COMPILER ARGS...   (the object is the argument after -o)
set -uo pipefail
object=""
previous=""
for arg in "$@"; do
  [ "$previous" = "-o" ] && object=$arg
  previous=$arg
done
if [ -z "$object" ]; then exec "$@"; fi

output=$(mktemp)
trap 'rm -f "$output"' EXIT
"$@" 2>"$output"
status=$?
report='^ptxas info|^[[:space:]]+[0-9]+ bytes stack frame'
grep -E "$report" "$output" >"$object.ptxas.log"
grep -vE "$report" "$output" >&2
exit $status
