// The kernel registries: (dtype, head dim) -> launch function, for the kernels this build
// compiled (CMake's FLASH4_DTYPES x FLASH4_HEAD_DIMS).
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "flash4/flash4.h"
#include "launch/bwd_params.hpp"
#include "launch/fwd_params.hpp"

namespace flash4::host {

using FwdLaunchFn = cudaError_t (*)(const FwdKernelParams&, int num_ctas, cudaStream_t);
using BwdLaunchFn = cudaError_t (*)(const BwdKernelParams&, int num_ctas, cudaStream_t);

struct KernelKey {
  flash4_dtype dtype;
  int head_dim;

  std::string to_string() const;
};

// nullptr when this build has no such kernel.
FwdLaunchFn find_fwd_kernel(const KernelKey& key);
// "bf16/d64 bf16/d128 ..." for messages.
std::string built_fwd_kernels();

BwdLaunchFn find_bwd_kernel(const KernelKey& key);
std::string built_bwd_kernels();

}  // namespace flash4::host
