// Host entry of the forward pass: plan (tile config, grid, tile order), find the kernel in the registry,
// build its TMA descriptors and launch it on the caller's stream. Called by the C ABI after validation.
#pragma once

#include <cstddef>
#include <string>

#include "flash4/flash4.h"

namespace flash4::host {

struct LaunchResult {
  flash4_status status = FLASH4_SUCCESS;
  std::string message;  // names the argument or the CUDA error when status != FLASH4_SUCCESS
};

// Device workspace bytes the forward needs for these (validated) params.
std::size_t forward_workspace_bytes(const flash4_fwd_params& params);

// Launch a validated forward. Never synchronizes.
LaunchResult launch_forward(const flash4_fwd_params& params, flash4_stream_t stream);

// The backward's host entry (src/host/dispatch/backward.cpp): zero the workspace accumulators, then
// preprocess, main kernel, postprocess on the caller's stream. Never synchronizes.
std::size_t backward_workspace_bytes(const flash4_bwd_params& params);
LaunchResult launch_backward(const flash4_bwd_params& params, flash4_stream_t stream);

}  // namespace flash4::host
