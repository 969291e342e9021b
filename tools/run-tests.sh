#!/usr/bin/env bash
# The test command (README): installs what is missing (tools/install-deps.sh, tools/python-env.sh), builds
# everything with warnings as errors, checks ptxas's report for spills, runs the C++ tests (CPU tests; GPU tests
# skip with "no CUDA device" where there is none) and the Python tests against the library just built, then the
# packages as others consume them: the CMake package, pkg-config and add_subdirectory (tools/check-packages.sh)
# and the sdist, the manylinux wheel and the installed Python package (tools/check-pip-install.sh).
# Fails if a stage fails, or if no C++ test or no Python test ran.
#   tools/run-tests.sh            full build (all dtypes and head dims)
#   FLASH4_CMAKE_ARGS="-DFLASH4_HEAD_DIMS=128 -DFLASH4_DTYPES=bf16" tools/run-tests.sh   fast inner loop
# Environment: FLASH4_BUILD_DIR (default build/), FLASH4_SKIP_PACKAGE_CHECKS=1 (stop after the Python tests).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${FLASH4_BUILD_DIR:-$root/build}
jobs=$(nproc)

bash "$root/tools/install-deps.sh"
venv=$("$root/tools/python-env.sh")
bash "$root/tools/build.sh" "$build" flash4 all
bash "$root/tools/check-spills.sh" "$build"

# ctest's closing lines stay as ctest prints them; the line per passing or skipped test goes to the log only.
ctest_log=$build/ctest.log
status=0
ctest --test-dir "$build" --output-on-failure --no-tests=error -j "$jobs" >"$ctest_log" 2>&1 || status=$?
grep -vE '^ +Start +[0-9]+: |^ *[0-9]+/[0-9]+ Test +#[0-9]+: .*(Passed|\*+Skipped) |^The following tests did not run:$|^\s+[0-9]+ - .* \(Skipped\)$' \
  "$ctest_log" || true
echo "($(grep -cE '^ *[0-9]+/[0-9]+ Test +#[0-9]+: .*\*+Skipped ' "$ctest_log") tests skipped; the list: $ctest_log)"
[ $status -eq 0 ] || { echo "flash4: ctest failed (log: $ctest_log)"; exit $status; }
# ctest's label summary of the run: "cpu = 9.66 sec*proc (249 tests)".
cpu_tests=$(sed -n 's/^cpu *=.*(\([0-9]*\) tests)$/\1/p' "$ctest_log")
[ "${cpu_tests:-0}" -gt 0 ] || { echo "flash4: no C++ CPU test ran"; exit 1; }

cd "$root"
pytest_log=$build/pytest.log
FLASH4_LIBRARY="$build/libflash4.so" PYTHONPATH="$root/python" "$venv/bin/python" -m pytest -q -p no:cacheprovider \
  tests/python tests/tools 2>&1 | tee "$pytest_log"
grep -qE '\b[1-9][0-9]* passed' "$pytest_log" || { echo "flash4: no Python test passed"; exit 1; }

if [ "${FLASH4_SKIP_PACKAGE_CHECKS:-0}" != 1 ]; then
  scratch=$build/package-checks
  bash "$root/tools/check-packages.sh" "$build" "$scratch/cmake"
  bash "$root/tools/check-pip-install.sh" "$scratch/pip"
fi
