// Host-side launch of one forward instantiation: raises the dynamic shared-memory limit (once per device)
// and starts a persistent grid of one CTA per SM (or fewer when there are fewer tiles) on the caller's
// stream.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "kernels/common/fwd_params.hpp"
#include "kernels/common/fwd_tile_config.hpp"
#include "kernels/sm90/fwd/kernel.cuh"

namespace flash4::sm90 {

// The shared-memory attribute is a property of the kernel on each device: set it the first time the
// kernel launches on a device rather than on every launch (a driver call per launch is host time the
// short problems feel). Devices past the 64 tracked ones set it every time.
template <class Element, int kHeadDim>
cudaError_t launch_fwd(const FwdKernelParams& params, int num_ctas, cudaStream_t stream) {
  constexpr FwdTileConfig kCfg = fwd_tile_config(kHeadDim);
  static std::atomic<uint64_t> configured_devices{0};
  auto* kernel = &fwd_kernel<Element, kHeadDim>;
  int device = 0;
  cudaError_t status = cudaGetDevice(&device);
  if (status != cudaSuccess) return status;
  const uint64_t bit = device < 64 ? uint64_t{1} << device : 0;
  if ((configured_devices.load(std::memory_order_acquire) & bit) == 0 || bit == 0) {
    status = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kCfg.smem_bytes());
    if (status != cudaSuccess) return status;
    configured_devices.fetch_or(bit, std::memory_order_release);
  }
  kernel<<<num_ctas, kCfg.threads(), kCfg.smem_bytes(), stream>>>(params);
  return cudaGetLastError();
}

}  // namespace flash4::sm90
