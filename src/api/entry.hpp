// What every extern "C" entry point shares (c_api.cpp, kvcache_c_api.cpp): the per-thread last-error
// message, the guard that turns every C++ exception into a status, and the copy of a caller's params struct
// of any released layout.
#pragma once

#include <cstring>
#include <exception>
#include <new>

#include "api/kvcache_validate.hpp"
#include "api/validate.hpp"
#include "flash4/flash4.h"

namespace flash4::api {

// Records `prefix` + `message` as this thread's last error (flash4_last_error_message) and returns status.
// Never allocates or throws (c_api.cpp keeps the message in a fixed thread-local buffer).
flash4_status record(flash4_status status, const char* prefix, const char* message) noexcept;

inline flash4_status record(const Check& check) noexcept {
  return record(check.status, "", check.ok() ? "" : check.message.c_str());
}

// Runs one entry point's body (returning a Check) with every exception turned into a status: std::bad_alloc
// means the host ran out of memory, any other exception is a library bug; neither is the caller's argument,
// so both are FLASH4_ERROR_INTERNAL.
template <class Body>
flash4_status guarded(Body&& body) noexcept {
  try {
    return record(body());
  } catch (const std::bad_alloc&) {
    return record(FLASH4_ERROR_INTERNAL, "out of host memory", "");
  } catch (const std::exception& e) {
    return record(FLASH4_ERROR_INTERNAL, "internal error: ", e.what());
  } catch (...) {
    return record(FLASH4_ERROR_INTERNAL, "internal error: an unknown C++ exception", "");
  }
}

// Copies the caller's struct into a current-layout one. A caller built against an older header has a smaller
// struct_size; only that many bytes are read, and fields appended since keep the zero set here (head_dim_v = 0:
// equal to head_dim; the forward's paged-cache fields: NULL block_table, not paged; the sink and seqused
// pointers: NULL). An unknown size copies nothing but struct_size, which validation then rejects.
template <class Params>
Params load(const Params& caller) {
  Params params{};
  params.struct_size = caller.struct_size;
  if (is_known_struct_size(caller)) std::memcpy(&params, &caller, caller.struct_size);
  return params;
}

}  // namespace flash4::api
