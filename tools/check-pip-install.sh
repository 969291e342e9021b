#!/usr/bin/env bash
# Checks the Python package the way a user installs it: `pip install ./python` into a fresh virtual
# environment (scikit-build-core drives the project's CMake and puts libflash4.so inside the package), then
# the Python CPU tests run against that installed copy from outside the source tree, with no PYTHONPATH and
# no FLASH4_LIBRARY. The venv sees the system site-packages, so torch is reused where it is installed already.
# One kernel is built (bf16, head dim 128) to keep the time down; the full kernel set is the default of a
# plain `pip install ./python`.
#   tools/check-pip-install.sh [SCRATCH_DIR]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
scratch=${1:-$(mktemp -d)}
mkdir -p "$scratch"
venv=$scratch/venv

python3 -m venv --system-site-packages "$venv"
"$venv/bin/python" -m pip install -q --upgrade pip
start=$(date +%s)
"$venv/bin/python" -m pip install -q "$root/python[test]" numpy \
  --config-settings=cmake.define.FLASH4_DTYPES=bf16 --config-settings=cmake.define.FLASH4_HEAD_DIMS=128 \
  --config-settings=build-dir="$scratch/build"
echo "flash4: pip install ./python took $(( $(date +%s) - start )) s"

cd "$scratch"  # away from python/, so that `import flash4` can only find the installed package
env -u PYTHONPATH -u FLASH4_LIBRARY "$venv/bin/python" - <<'PY'
import pathlib
import flash4
from flash4 import _loader

package = pathlib.Path(flash4.__file__).parent
assert "site-packages" in str(package), f"flash4 imported from {package}, not from the installed wheel"
library = pathlib.Path(_loader.locate_library())
assert library.parent == package, f"the loader found {library}, not the packaged library"
_loader.load_library()
print(f"flash4 {flash4.__version__} installed at {package}; library {library.name}, version {_loader.library_version()}")
PY
env -u PYTHONPATH -u FLASH4_LIBRARY "$venv/bin/python" -m pytest -q -p no:cacheprovider "$root/tests/python" \
  --ignore="$root/tests/python/gpu" --rootdir="$scratch"
