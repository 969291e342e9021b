"""Finds and opens libflash4.so through ctypes.

The library is opened on the first launch, not at import: argument checks and fake-tensor shape
inference work on machines that have torch but no library (CI without a GPU, a laptop).

Where it looks, in order:
  1. the file named by the FLASH4_LIBRARY environment variable, when set (a CMake build tree's
     libflash4.so, say); a wrong path there is an error, not a reason to look elsewhere;
  2. libflash4.so inside this package, where `pip install ./python` puts it.
"""

import ctypes
import functools
import os
from pathlib import Path

from . import _abi

LIBRARY_NAME = "libflash4.so"
ENV_VAR = "FLASH4_LIBRARY"
PACKAGE_DIR = Path(__file__).resolve().parent


class Flash4LibraryError(ImportError):
    """The shared library is missing, cannot be loaded, or is not a compatible flash4 build."""


def locate_library(environ=os.environ, package_dir=PACKAGE_DIR):
    """The path of the library to open, or Flash4LibraryError naming the places looked at."""
    explicit = environ.get(ENV_VAR)
    if explicit:
        path = Path(explicit)
        if not path.is_file():
            raise Flash4LibraryError(
                f"{ENV_VAR}={explicit} does not name a file; point it at a libflash4.so built with CMake, "
                f"or unset it to use the one installed with the package"
            )
        return path
    path = Path(package_dir) / LIBRARY_NAME
    if not path.is_file():
        raise Flash4LibraryError(
            f"flash4's shared library was not found: looked for {path} (installed there by "
            f"`pip install ./python`) and {ENV_VAR} is not set (set it to a libflash4.so built with CMake)"
        )
    return path


def _cuda_hint(error_text):
    """A sentence for a load failure caused by a missing CUDA library, else ''."""
    if "libcu" not in error_text and "cuda" not in error_text.lower():
        return ""
    import torch  # only for the message: the loader itself does not need torch

    return (
        f"; it needs a CUDA library that this machine lacks, so it was built for another CUDA "
        f"(torch here uses CUDA {torch.version.cuda}): rebuild it on this machine with `pip install ./python`"
    )


def open_library(path):
    """Open `path`, declare the C signatures and check the version; Flash4LibraryError on any failure."""
    try:
        lib = ctypes.CDLL(str(path))
    except OSError as err:
        raise Flash4LibraryError(f"could not load {path}: {err}{_cuda_hint(str(err))}") from err
    for name, (restype, argtypes) in _abi.FUNCTIONS.items():
        try:
            function = getattr(lib, name)
        except AttributeError:
            raise Flash4LibraryError(f"{path} is not a flash4 library: it does not export {name}") from None
        function.restype = restype
        function.argtypes = argtypes
    version = lib.flash4_version()
    if version // 10000 != _abi.ABI_MAJOR or version < _abi.MIN_VERSION:
        raise Flash4LibraryError(
            f"{path} is flash4 {lib.flash4_version_string().decode(errors='replace')} (flash4_version() = "
            f"{version}); this Python package needs {_abi.ABI_MAJOR}.x, at least version code "
            f"{_abi.MIN_VERSION}: rebuild the library from the same checkout as the package"
        )
    return lib


@functools.cache
def load_library():
    """The opened library, shared by every call; a failure is not cached, so fixing the path and
    calling again works without restarting Python."""
    return open_library(locate_library())


def library_version():
    """The loaded library's version text, e.g. '0.1.0'."""
    return load_library().flash4_version_string().decode()
