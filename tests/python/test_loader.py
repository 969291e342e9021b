"""flash4._loader: where the library is looked for, and the errors when it is missing or unusable.

Libraries built here with gcc stand in for libflash4.so (see conftest.STUB_SOURCE); the real library is
loaded too when FLASH4_LIBRARY names one (CI points it at the CMake build), else that test is skipped.
"""

import re

import pytest

import flash4
from conftest import REPO_ROOT, STUB_SOURCE
from flash4 import _abi, _loader
from flash4._loader import Flash4LibraryError, locate_library, open_library


def test_library_error_is_an_import_error():
    assert issubclass(Flash4LibraryError, ImportError)


def test_missing_library_names_where_it_looked(tmp_path):
    with pytest.raises(Flash4LibraryError) as info:
        locate_library(environ={}, package_dir=tmp_path)
    message = str(info.value)
    assert str(tmp_path / "libflash4.so") in message
    assert "FLASH4_LIBRARY" in message and "pip install ./python" in message


def test_env_var_naming_no_file_is_an_error_even_with_a_packaged_library(tmp_path):
    (tmp_path / "libflash4.so").touch()
    missing = tmp_path / "build" / "libflash4.so"
    with pytest.raises(Flash4LibraryError, match=f"FLASH4_LIBRARY={re.escape(str(missing))} does not name a file"):
        locate_library(environ={"FLASH4_LIBRARY": str(missing)}, package_dir=tmp_path)


def test_env_var_wins_over_the_packaged_library(tmp_path):
    (tmp_path / "libflash4.so").touch()
    chosen = tmp_path / "other.so"
    chosen.touch()
    assert locate_library(environ={"FLASH4_LIBRARY": str(chosen)}, package_dir=tmp_path) == chosen


def test_packaged_library_is_found(tmp_path):
    (tmp_path / "libflash4.so").touch()
    assert locate_library(environ={}, package_dir=tmp_path) == tmp_path / "libflash4.so"


def test_a_file_that_is_not_a_library(tmp_path):
    path = tmp_path / "libflash4.so"
    path.write_text("not an ELF file")
    with pytest.raises(Flash4LibraryError, match=f"could not load {re.escape(str(path))}"):
        open_library(path)


def test_a_library_built_against_a_missing_cuda_runtime(compile_c, tmp_path):
    # A dependency that exists at link time but not at load time, as when the library was built for
    # another CUDA than the one installed.
    runtime = compile_c("int cudart_stand_in(void) { return 0; }", "libcudart.so.99",
                        "-shared", "-fPIC", "-Wl,-soname,libcudart.so.99")
    library = compile_c(STUB_SOURCE, "libflash4_needs_cudart.so", "-shared", "-fPIC",
                        "-Wl,--no-as-needed", f"-L{runtime.parent}", "-l:libcudart.so.99")
    with pytest.raises(Flash4LibraryError, match="libcudart.so.99.*built for another CUDA"):
        open_library(library)


def test_a_library_without_the_abi(compile_c):
    library = compile_c("int flash4_version(void) { return 100; }", "libnot_flash4.so", "-shared", "-fPIC")
    with pytest.raises(Flash4LibraryError, match="is not a flash4 library: it does not export flash4_version_string"):
        open_library(library)


@pytest.mark.parametrize("version", [99, 10000])  # 0.0.99 is older than the bindings; 1.0.0 is another ABI
def test_an_incompatible_version(compile_c, version):
    library = compile_c(STUB_SOURCE, f"libflash4_v{version}.so", "-shared", "-fPIC", f"-DSTUB_VERSION={version}")
    with pytest.raises(Flash4LibraryError, match=f"flash4_version\\(\\) = {version}.*needs 0.x"):
        open_library(library)


def test_load_library_follows_the_env_var(stub_library, monkeypatch):
    monkeypatch.setenv("FLASH4_LIBRARY", str(stub_library))
    _loader.load_library.cache_clear()
    try:
        assert flash4.library_version() == "stub"
        assert _loader.load_library() is _loader.load_library()  # opened once
    finally:
        _loader.load_library.cache_clear()


def test_the_package_version_is_the_one_version_file():
    assert re.fullmatch(r"[0-9]+\.[0-9]+\.[0-9]+", flash4.__version__)
    assert flash4.__version__ == (REPO_ROOT / "python" / "flash4" / "VERSION").read_text().strip()
    assert "python/flash4/VERSION" in (REPO_ROOT / "CMakeLists.txt").read_text()


def test_the_real_library_loads(real_library):
    lib = open_library(real_library)
    assert lib.flash4_version_string().decode() == flash4.__version__
    assert lib.flash4_status_string(_abi.Status.ERROR_NOT_IMPLEMENTED).decode() == "FLASH4_ERROR_NOT_IMPLEMENTED"
