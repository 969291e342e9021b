// Host-side launch of one forward instantiation: raises the dynamic shared-memory limit and starts a
// persistent grid of one CTA per SM (or fewer when there are fewer tiles) on the caller's stream.
#pragma once

#include <cuda_runtime.h>

#include "kernels/common/fwd_params.hpp"
#include "kernels/common/fwd_tile_config.hpp"
#include "kernels/sm90/fwd/kernel.cuh"

namespace flash4::sm90 {

template <class Element, int kHeadDim>
cudaError_t launch_fwd(const FwdKernelParams& params, int num_ctas, cudaStream_t stream) {
  constexpr FwdTileConfig kCfg = fwd_tile_config(kHeadDim);
  auto* kernel = &fwd_kernel<Element, kHeadDim>;
  // Setting the attribute is cheap and idempotent; doing it per launch keeps multi-device use correct.
  cudaError_t status = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kCfg.smem_bytes());
  if (status != cudaSuccess) return status;
  kernel<<<num_ctas, kCfg.threads(), kCfg.smem_bytes(), stream>>>(params);
  return cudaGetLastError();
}

}  // namespace flash4::sm90
