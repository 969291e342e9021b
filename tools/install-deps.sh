#!/usr/bin/env bash
# The Debian packages the build and the tests need (the CUDA 13 toolkit itself is not one of them: nvcc is
# looked for on PATH, then in /usr/local/cuda/bin). Installs the missing ones when run as root; otherwise names
# the command to run and fails. Both README commands (tools/run-main.sh, tools/run-tests.sh) call it first.
set -euo pipefail
packages=(
  cmake ninja-build g++         # the build
  libgtest-dev                  # the C++ tests
  libcli11-dev nlohmann-json3-dev  # flash4-bench: its flags and its JSON
  pkgconf                       # the pkg-config consumer check
  python3-venv                  # the test venv (tools/python-env.sh)
)
missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "ok installed" || missing+=("$package")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ]; then
  echo "flash4: missing Debian packages; install them with:" >&2
  echo "  sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
echo "flash4: installing ${missing[*]}"
apt-get update -q >/dev/null
DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >/dev/null
