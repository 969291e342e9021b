// Host-side launch of one forward instantiation: raises the dynamic shared-memory limit (once per device)
// and starts a persistent grid of one CTA per SM (or fewer when there are fewer tiles) on the caller's
// stream.
#pragma once

#include <cuda_runtime.h>

#include "kernels/sm90/fwd/kernel.cuh"
#include "kernels/sm90/shared_memory_limit.cuh"
#include "launch/fwd_params.hpp"
#include "launch/fwd_tile_config.hpp"

namespace flash4::sm90 {

template <class Element, int kHeadDim>
cudaError_t launch_fwd(const FwdKernelParams& params, int num_ctas, cudaStream_t stream) {
  constexpr FwdTileConfig kCfg = fwd_tile_config(kHeadDim);
  constexpr auto* kernel = &fwd_kernel<Element, kHeadDim>;
  const cudaError_t status = raise_shared_memory_limit<kernel>(kCfg.smem_bytes());
  if (status != cudaSuccess) return status;
  kernel<<<num_ctas, kCfg.threads(), kCfg.smem_bytes(), stream>>>(params);
  return cudaGetLastError();
}

}  // namespace flash4::sm90
