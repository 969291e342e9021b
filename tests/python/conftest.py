"""Shared fixtures of the Python tests: the repository layout and small C programs built with gcc.

The CPU tests reach the C side without the real library (which needs CUDA to build and a GPU to run):
they compile the real header, and a stub library that implements the C ABI's entry points with a few of
the real checks, so the ctypes path and the error reporting run end to end in CI.
"""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
INCLUDE_DIR = REPO_ROOT / "include"
HEADER = INCLUDE_DIR / "flash4" / "flash4.h"

# A stand-in for libflash4.so: every exported function, the struct_size and head-ratio checks of the real
# validation, and a backward that needs a workspace but is not implemented, as in this release; it records the
# stream and workspace each launch was handed (stub_seen_*). STUB_VERSION sets flash4_version().
STUB_SOURCE = r"""
#include <stdint.h>
#include <stdio.h>
#include "flash4/flash4.h"

#ifndef STUB_VERSION
#define STUB_VERSION 200
#endif
#define STUB_BWD_WORKSPACE_BYTES 4096

static _Thread_local char last_error[256];

static flash4_status fail(flash4_status status, const char* message) {
  snprintf(last_error, sizeof last_error, "%s", message);
  return status;
}

int flash4_version(void) { return STUB_VERSION; }
const char* flash4_version_string(void) { return "stub"; }
const char* flash4_status_string(flash4_status status) {
  switch (status) {
    case FLASH4_ERROR_INVALID_STRUCT_SIZE: return "FLASH4_ERROR_INVALID_STRUCT_SIZE";
    case FLASH4_ERROR_HEAD_RATIO: return "FLASH4_ERROR_HEAD_RATIO";
    case FLASH4_ERROR_NOT_IMPLEMENTED: return "FLASH4_ERROR_NOT_IMPLEMENTED";
    default: return "a status the stub never returns";
  }
}
const char* flash4_last_error_message(void) { return last_error; }

flash4_status flash4_fwd_check(const flash4_fwd_params* p) {
  last_error[0] = 0;
  if (p->struct_size != sizeof(flash4_fwd_params))
    return fail(FLASH4_ERROR_INVALID_STRUCT_SIZE, "params.struct_size is not sizeof(flash4_fwd_params)");
  if (p->heads_kv <= 0 || p->heads_q % p->heads_kv)
    return fail(FLASH4_ERROR_HEAD_RATIO, "heads_q is not a multiple of heads_kv");
  return FLASH4_SUCCESS;
}
flash4_status flash4_fwd_workspace_size(const flash4_fwd_params* p, size_t* bytes) {
  *bytes = 0;
  return flash4_fwd_check(p);
}

flash4_status flash4_bwd_check(const flash4_bwd_params* p) {
  last_error[0] = 0;
  if (p->struct_size != sizeof(flash4_bwd_params))
    return fail(FLASH4_ERROR_INVALID_STRUCT_SIZE, "params.struct_size is not sizeof(flash4_bwd_params)");
  return FLASH4_SUCCESS;
}
/* The backward asks for a workspace, as the real one will. */
flash4_status flash4_bwd_workspace_size(const flash4_bwd_params* p, size_t* bytes) {
  *bytes = STUB_BWD_WORKSPACE_BYTES;
  return flash4_bwd_check(p);
}

/* What the last launch was handed, for the tests to read back (not part of the C ABI). */
static _Thread_local uintptr_t seen_stream, seen_workspace;
static _Thread_local size_t seen_workspace_bytes;
uintptr_t stub_seen_stream(void) { return seen_stream; }
uintptr_t stub_seen_workspace(void) { return seen_workspace; }
size_t stub_seen_workspace_bytes(void) { return seen_workspace_bytes; }

flash4_status flash4_fwd(const flash4_fwd_params* p, flash4_stream_t stream) {
  seen_stream = (uintptr_t)stream;
  seen_workspace = (uintptr_t)p->workspace;
  seen_workspace_bytes = p->workspace_bytes;
  return flash4_fwd_check(p);
}
flash4_status flash4_bwd(const flash4_bwd_params* p, flash4_stream_t stream) {
  seen_stream = (uintptr_t)stream;
  seen_workspace = (uintptr_t)p->workspace;
  seen_workspace_bytes = p->workspace_bytes;
  if (p->workspace_bytes < STUB_BWD_WORKSPACE_BYTES || p->workspace == NULL)
    return fail(FLASH4_ERROR_INVALID_ARGUMENT, "workspace is smaller than flash4_bwd_workspace_size()");
  return fail(FLASH4_ERROR_NOT_IMPLEMENTED, "flash4_bwd: the backward kernel is not in this release");
}
"""


@pytest.fixture(scope="session")
def gcc():
    path = shutil.which("gcc")
    if path is None:
        pytest.skip("gcc is not installed")
    return path


@pytest.fixture(scope="session")
def compile_c(gcc, tmp_path_factory):
    """compile_c(source, name, *flags) -> path of the built file (an executable, or a library with -shared)."""
    out_dir = tmp_path_factory.mktemp("c")

    def build(source, name, *flags):
        src = out_dir / f"{name}.c"
        src.write_text(source)
        out = out_dir / name
        subprocess.run([gcc, "-std=c11", "-Wall", "-Werror", f"-I{INCLUDE_DIR}", *flags, str(src), "-o", str(out)],
                       check=True, capture_output=True, text=True)
        return out

    return build


@pytest.fixture(scope="session")
def stub_library(compile_c):
    return compile_c(STUB_SOURCE, "libflash4_stub.so", "-shared", "-fPIC")


@pytest.fixture(scope="session")
def real_library():
    """The built libflash4.so named by FLASH4_LIBRARY (CI sets it after the CMake build), else skip."""
    path = os.environ.get("FLASH4_LIBRARY", "")
    if not os.path.isfile(path):
        pytest.skip("FLASH4_LIBRARY does not name a built libflash4.so")
    return Path(path)
