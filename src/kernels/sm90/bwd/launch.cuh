// Host-side launch of one backward instantiation: preprocess (which zeroes the dQ accumulator outside
// deterministic mode), the sinks' gradient when there are sinks, main kernel, postprocess, in that order on the
// caller's stream. In deterministic mode the host has zeroed the semaphores before.
#pragma once

#include <cuda_runtime.h>

#include "kernels/sm90/bwd/kernel.cuh"
#include "kernels/sm90/bwd/prepost.cuh"
#include "kernels/sm90/bwd/sink_grad.cuh"
#include "kernels/sm90/shared_memory_limit.cuh"
#include "launch/bwd_params.hpp"

namespace flash4::sm90 {

template <class Element, int kHeadDim>
cudaError_t launch_bwd(const BwdKernelParams& params, int num_ctas, cudaStream_t stream) {
  constexpr BwdTileConfig kCfg = bwd_tile_config(kHeadDim);
  const dim3 row_block(kRowKernelWarps * 32);
  // Each launch is checked before the next: a kernel must not run on a workspace its predecessor did
  // not initialize.
  bwd_preprocess_kernel<Element, kHeadDim>
      <<<bwd_row_grid(params.max_seqlen_q + kCfg.block_m, params), row_block, 0, stream>>>(params);
  cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) return status;
  if (params.sink != nullptr) {
    bwd_sink_grad_kernel<kHeadDim><<<params.heads_q, kSinkGradThreads, 0, stream>>>(params);
    status = cudaGetLastError();
    if (status != cudaSuccess) return status;
  }

  constexpr auto* kSoftcapKernel = &bwd_kernel<Element, kHeadDim, true>;
  constexpr auto* kPlainKernel = &bwd_kernel<Element, kHeadDim, false>;
  auto* kernel = params.has_softcap ? kSoftcapKernel : kPlainKernel;
  status = params.has_softcap ? raise_shared_memory_limit<kSoftcapKernel>(kCfg.smem_bytes())
                              : raise_shared_memory_limit<kPlainKernel>(kCfg.smem_bytes());
  if (status != cudaSuccess) return status;
  // num_ctas is the persistent grid (bwd_grid_ctas), or one CTA per tile for a kernel that is not
  // persistent.
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(unsigned(num_ctas));
  config.blockDim = dim3(unsigned(kCfg.threads()));
  config.dynamicSmemBytes = size_t(kCfg.smem_bytes());
  config.stream = stream;
  status = cudaLaunchKernelEx(&config, kernel, params);
  if (status != cudaSuccess) return status;

  bwd_postprocess_kernel<Element, kHeadDim>
      <<<bwd_row_grid(params.max_seqlen_q, params), row_block, 0, stream>>>(params);
  return cudaGetLastError();
}

}  // namespace flash4::sm90
