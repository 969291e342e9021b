// The NO_KERNEL answer of a direction whose build has no kernel wide enough for a call's head dims: the
// message names both head dims, the kernel that would serve them and the kernels that are built.
#pragma once

#include <string>

#include "host/dispatch/registry.hpp"
#include "host/kernel_choice.hpp"
#include "launch/launch_result.hpp"

namespace flash4::host {

template <class Params>
LaunchResult no_kernel(const char* direction, const Params& p, const std::string& built) {
  LaunchResult result;
  result.status = FLASH4_ERROR_NO_KERNEL;
  result.message = std::string("no ") + direction + " kernel in this build serves head_dim " +
                   std::to_string(p.head_dim) + ", head_dim_v " + std::to_string(value_head_dim(p)) + " (" +
                   KernelKey{p.dtype, needed_head_dim(p)}.to_string() + " or wider; built: " + built +
                   "); rebuild with FLASH4_DTYPES / FLASH4_HEAD_DIMS including one";
  return result;
}

}  // namespace flash4::host
