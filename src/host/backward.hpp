// Host entry of the backward pass (src/host/dispatch/backward.cpp): zero the workspace accumulators, then
// preprocess, main kernel, postprocess on the caller's stream. Called by the C ABI after validation.
#pragma once

#include <cstddef>

#include "flash4/flash4.h"
#include "launch/launch_result.hpp"

namespace flash4::host {

// Device workspace bytes the backward needs for these (validated) params.
std::size_t backward_workspace_bytes(const flash4_bwd_params& params);

// Launch a validated backward. Never synchronizes.
LaunchResult launch_backward(const flash4_bwd_params& params, flash4_stream_t stream);

}  // namespace flash4::host
