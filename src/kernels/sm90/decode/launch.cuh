// Host-side launch of one decode instantiation (dtype, kernel width): the main kernel for the call's row tiles,
// then, when the key range is split, the combine kernel, both on the caller's stream.
#pragma once

#include <cuda_runtime.h>

#include "kernels/sm90/decode/combine.cuh"
#include "kernels/sm90/decode/kernel.cuh"
#include "kernels/sm90/shared_memory_limit.cuh"
#include "launch/decode_config.hpp"
#include "launch/decode_params.hpp"

namespace flash4::decode {

template <class Element, int kWidth, int kRowTiles>
cudaError_t launch_main(const DecodeParams& params, int ctas, cudaStream_t stream) {
  constexpr int kSharedBytes = Config<kWidth>::kLaunchSharedBytes;
  constexpr auto* kernel = &decode_kernel<Element, kWidth, kRowTiles>;
  const cudaError_t status = sm90::raise_shared_memory_limit<kernel>(kSharedBytes);
  if (status != cudaSuccess) return status;
  kernel<<<ctas, kThreads, kSharedBytes, stream>>>(params);
  return cudaGetLastError();
}

// ctas: the main grid (row_blocks x splits x heads_kv x batch); row_tiles: row_tiles_for(params.rows).
template <class Element, int kWidth>
cudaError_t launch_decode(const DecodeParams& params, int row_tiles, int ctas, cudaStream_t stream) {
  cudaError_t status = cudaSuccess;
  switch (row_tiles) {
    case 1: status = launch_main<Element, kWidth, 1>(params, ctas, stream); break;
    case 2: status = launch_main<Element, kWidth, 2>(params, ctas, stream); break;
    default: status = launch_main<Element, kWidth, kMaxRowTiles>(params, ctas, stream); break;
  }
  if (status != cudaSuccess || params.splits == 1) return status;
  const long long rows = static_cast<long long>(params.batch) * params.seqlen_q * params.heads_q;
  const unsigned blocks = static_cast<unsigned>((rows + kCombineWarps - 1) / kCombineWarps);
  combine_kernel<Element, kWidth><<<blocks, 32 * kCombineWarps, 0, stream>>>(params);
  return cudaGetLastError();
}

}  // namespace flash4::decode
