// Host entry of flash4_kvcache: plan (row tiles, splits, workspace), find the decode kernel for the dtype
// and head dim, fill its parameters and launch it (and the split merge) on the caller's stream. Called by
// the C ABI after validation (src/api/kvcache_c_api.cpp); implemented in src/host/dispatch/kvcache.cpp.
#pragma once

#include <cstddef>

#include "flash4/flash4_kvcache.h"
#include "launch/launch_result.hpp"

namespace flash4::host {

// Device workspace bytes for validated params (reads the current device's SM count when num_splits is 0).
// FLASH4_SUCCESS or the device error, with `bytes` set.
LaunchResult kvcache_workspace_bytes(const flash4_kvcache_params& params, std::size_t& bytes);

// Launch validated params. Never synchronizes.
LaunchResult launch_kvcache(const flash4_kvcache_params& params, flash4_stream_t stream);

}  // namespace flash4::host
