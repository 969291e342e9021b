// Host entry of the forward pass: plan (tile config, grid, tile order), find the kernel in the registry,
// build its TMA descriptors and launch it on the caller's stream. Called by the C ABI after validation.
#pragma once

#include <cstddef>

#include "flash4/flash4.h"
#include "launch/launch_result.hpp"

namespace flash4::host {

// Device workspace bytes the forward needs for these (validated) params.
std::size_t forward_workspace_bytes(const flash4_fwd_params& params);

// Launch a validated forward. Never synchronizes.
LaunchResult launch_forward(const flash4_fwd_params& params, flash4_stream_t stream);

}  // namespace flash4::host
