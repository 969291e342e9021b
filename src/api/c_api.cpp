// The extern "C" entry points of flash4.h. Each one loads the caller's params (of any released layout),
// validates them, and hands a valid, non-empty problem to the host layer (src/host/forward.hpp and
// backward.hpp); a valid empty problem gets the fills it defines instead (src/host/empty_problem.hpp: O = 0
// and LSE = -inf for an empty key set, zero gradients), or nothing at all when it has nothing to write.
//
// At the ABI boundary nothing throws, prints, exits or synchronizes. Every C++ exception is caught and
// returned as FLASH4_ERROR_INTERNAL: std::bad_alloc means the host ran out of memory while planning, any other
// exception is a library bug; neither is the caller's argument, so neither may read as INVALID_ARGUMENT.
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <type_traits>
#include <utility>

#include "api/entry.hpp"
#include "api/validate.hpp"
#include "flash4/flash4.h"
#include "flash4_version.hpp"
#include "host/backward.hpp"
#include "host/empty_problem.hpp"
#include "host/fill.hpp"
#include "host/forward.hpp"

namespace {

// The last error lives in a fixed buffer, so that recording it can neither allocate nor throw (it also
// records std::bad_alloc). Longer messages are truncated.
constexpr std::size_t kMaxMessageBytes = 1024;
thread_local char t_last_error[kMaxMessageBytes] = "";

}  // namespace

// entry.hpp: the one writer of this thread's last error.
flash4_status flash4::api::record(flash4_status status, const char* prefix, const char* message) noexcept {
  std::snprintf(t_last_error, sizeof(t_last_error), "%s%s", prefix, message);
  return status;
}

namespace {

using flash4::api::guarded;
using flash4::api::load;

flash4::api::Check validate(const flash4_fwd_params& p) { return flash4::api::validate_fwd(p); }
flash4::api::Check validate(const flash4_bwd_params& p) { return flash4::api::validate_bwd(p); }

// The params that last passed validation on this thread, canonicalized. Validation reads every byte of the
// params but the workspace fields (the launch checks those itself), so the same bytes pass again: the usual
// caller sizes the workspace and then launches with the same params (the workspace fields filled in), and
// that launch is not validated twice. Equal bytes are the only test, so a hit can never accept what
// validation refuses.
template <class Params>
struct LastValid {
  static constexpr std::size_t kWorkspaceBegin = offsetof(Params, workspace);
  static constexpr std::size_t kWorkspaceEnd = offsetof(Params, workspace_bytes) + sizeof(std::size_t);
  static_assert(offsetof(Params, workspace_bytes) == kWorkspaceBegin + sizeof(void*),
                "the workspace fields are adjacent: the bytes between them are all validation skips");

  bool set = false;
  Params loaded;
  Params canonical;

  bool matches(const Params& params) const {
    const auto* a = reinterpret_cast<const unsigned char*>(&loaded);
    const auto* b = reinterpret_cast<const unsigned char*>(&params);
    return set && std::memcmp(a, b, kWorkspaceBegin) == 0 &&
           std::memcmp(a + kWorkspaceEnd, b + kWorkspaceEnd, sizeof(Params) - kWorkspaceEnd) == 0;
  }
};

// Loads and validates the caller's params into `out` (canonicalized when valid).
template <class Params>
flash4::api::Check load_valid(const Params* caller, Params& out) {
  static_assert(std::is_trivially_copyable_v<Params>);
  thread_local LastValid<Params> last;
  if (caller == nullptr) return {FLASH4_ERROR_NULL_POINTER, "params is NULL; pass the address of a params struct"};
  out = load(*caller);
  if (last.matches(out)) {
    void* const workspace = out.workspace;
    const std::size_t workspace_bytes = out.workspace_bytes;
    out = last.canonical;
    out.workspace = workspace;
    out.workspace_bytes = workspace_bytes;
    return {};
  }
  flash4::api::Check check = validate(out);
  if (check.ok()) {
    last.loaded = out;
    out = flash4::api::canonicalize(out);
    last.canonical = out;
    last.set = true;
  }
  return check;
}

template <class Params, class WorkspaceBytes>
flash4_status workspace_size(const Params* caller, std::size_t* bytes, WorkspaceBytes host_bytes) noexcept {
  return guarded([&]() -> flash4::api::Check {
    if (bytes == nullptr) return {FLASH4_ERROR_NULL_POINTER, "bytes is NULL; pass the address of a size_t"};
    *bytes = 0;  // also the answer for an empty problem: its fills need no workspace
    Params params;
    if (flash4::api::Check check = load_valid(caller, params); !check.ok()) return check;
    if (!flash4::api::is_empty(params)) *bytes = host_bytes(params);
    return {};
  });
}

template <class Params, class Launch>
flash4_status launch(const Params* caller, flash4_stream_t stream, Launch host_launch) noexcept {
  return guarded([&]() -> flash4::api::Check {
    Params params;
    if (flash4::api::Check check = load_valid(caller, params); !check.ok()) return check;
    // An empty problem computes nothing: it gets the fills it defines (possibly none) instead of a kernel.
    flash4::host::LaunchResult result =
        flash4::api::is_empty(params)
            ? flash4::host::launch_fills(flash4::host::empty_problem_fills(params), stream)
            : host_launch(params, stream);
    return {result.status, std::move(result.message)};
  });
}

template <class Params>
flash4_status check_only(const Params* caller) noexcept {
  return guarded([&] {
    Params params;
    return load_valid(caller, params);
  });
}

}  // namespace

extern "C" {

int flash4_version(void) {
  return FLASH4_VERSION_MAJOR * 10000 + FLASH4_VERSION_MINOR * 100 + FLASH4_VERSION_PATCH;
}

const char* flash4_version_string(void) { return FLASH4_VERSION_STRING; }

const char* flash4_status_string(flash4_status status) {
  switch (status) {
    case FLASH4_SUCCESS: return "FLASH4_SUCCESS";
    case FLASH4_ERROR_INVALID_STRUCT_SIZE: return "FLASH4_ERROR_INVALID_STRUCT_SIZE";
    case FLASH4_ERROR_NULL_POINTER: return "FLASH4_ERROR_NULL_POINTER";
    case FLASH4_ERROR_UNSUPPORTED_DTYPE: return "FLASH4_ERROR_UNSUPPORTED_DTYPE";
    case FLASH4_ERROR_UNSUPPORTED_HEAD_DIM: return "FLASH4_ERROR_UNSUPPORTED_HEAD_DIM";
    case FLASH4_ERROR_HEAD_RATIO: return "FLASH4_ERROR_HEAD_RATIO";
    case FLASH4_ERROR_MISALIGNED: return "FLASH4_ERROR_MISALIGNED";
    case FLASH4_ERROR_INVALID_SIZE: return "FLASH4_ERROR_INVALID_SIZE";
    case FLASH4_ERROR_INVALID_MASK: return "FLASH4_ERROR_INVALID_MASK";
    case FLASH4_ERROR_INVALID_VARLEN: return "FLASH4_ERROR_INVALID_VARLEN";
    case FLASH4_ERROR_SIZE_OVERFLOW: return "FLASH4_ERROR_SIZE_OVERFLOW";
    case FLASH4_ERROR_INVALID_ARGUMENT: return "FLASH4_ERROR_INVALID_ARGUMENT";
    case FLASH4_ERROR_NO_KERNEL: return "FLASH4_ERROR_NO_KERNEL";
    case FLASH4_ERROR_NO_DEVICE: return "FLASH4_ERROR_NO_DEVICE";
    case FLASH4_ERROR_CUDA: return "FLASH4_ERROR_CUDA";
    case FLASH4_ERROR_NOT_IMPLEMENTED: return "FLASH4_ERROR_NOT_IMPLEMENTED";
    case FLASH4_ERROR_INTERNAL: return "FLASH4_ERROR_INTERNAL";
  }
  return "unknown flash4_status";
}

const char* flash4_last_error_message(void) { return t_last_error; }

flash4_status flash4_fwd_check(const flash4_fwd_params* params) { return check_only(params); }

flash4_status flash4_fwd_workspace_size(const flash4_fwd_params* params, size_t* bytes) {
  return workspace_size(params, bytes, flash4::host::forward_workspace_bytes);
}

flash4_status flash4_fwd(const flash4_fwd_params* params, flash4_stream_t stream) {
  return launch(params, stream, flash4::host::launch_forward);
}

flash4_status flash4_bwd_check(const flash4_bwd_params* params) { return check_only(params); }

flash4_status flash4_bwd_workspace_size(const flash4_bwd_params* params, size_t* bytes) {
  return workspace_size(params, bytes, flash4::host::backward_workspace_bytes);
}

flash4_status flash4_bwd(const flash4_bwd_params* params, flash4_stream_t stream) {
  return launch(params, stream, flash4::host::launch_backward);
}

}  // extern "C"
