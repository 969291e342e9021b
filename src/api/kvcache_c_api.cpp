// The extern "C" entry points of flash4_kvcache.h: load the caller's params, validate them, and hand them to
// the host layer (host/kvcache.hpp). As in c_api.cpp, nothing throws, prints, exits or synchronizes here.
#include <utility>

#include "api/entry.hpp"
#include "api/kvcache_validate.hpp"
#include "flash4/flash4_kvcache.h"
#include "host/kvcache.hpp"

namespace {

using flash4::api::Check;

// Loads and validates the caller's params into `out` (canonicalized when valid).
Check load_valid(const flash4_kvcache_params* caller, flash4_kvcache_params& out) {
  if (caller == nullptr) return {FLASH4_ERROR_NULL_POINTER, "params is NULL; pass the address of a params struct"};
  out = flash4::api::load(*caller);
  Check check = flash4::api::validate_kvcache(out);
  if (check.ok()) out = flash4::api::canonicalize(out);
  return check;
}

Check from(flash4::host::LaunchResult result) { return {result.status, std::move(result.message)}; }

}  // namespace

extern "C" {

flash4_status flash4_kvcache_check(const flash4_kvcache_params* params) {
  return flash4::api::guarded([&] {
    flash4_kvcache_params p;
    return load_valid(params, p);
  });
}

flash4_status flash4_kvcache_workspace_size(const flash4_kvcache_params* params, size_t* bytes) {
  return flash4::api::guarded([&]() -> Check {
    if (bytes == nullptr) return {FLASH4_ERROR_NULL_POINTER, "bytes is NULL; pass the address of a size_t"};
    *bytes = 0;
    flash4_kvcache_params p;
    if (Check check = load_valid(params, p); !check.ok()) return check;
    return from(flash4::host::kvcache_workspace_bytes(p, *bytes));
  });
}

flash4_status flash4_kvcache(const flash4_kvcache_params* params, flash4_stream_t stream) {
  return flash4::api::guarded([&]() -> Check {
    flash4_kvcache_params p;
    if (Check check = load_valid(params, p); !check.ok()) return check;
    return from(flash4::host::launch_kvcache(p, stream));
  });
}

}  // extern "C"
