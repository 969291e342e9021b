// Implements launch/varlen_tiles.hpp: one CTA runs the phases of kernels/common/varlen_tiles.hpp, a counting
// sort of the sequences by query-block count, most first. One CTA because each phase needs the previous one
// over the whole batch, and __syncthreads orders them where a grid would need a launch per phase; the work
// is a few passes over the batch and the bins.
#include <cuda_runtime.h>

#include "launch/varlen_tiles.hpp"

namespace flash4 {
namespace {

constexpr int kThreads = 1024;
constexpr int kWarp = 32;
constexpr unsigned kFullMask = 0xffffffffu;
static_assert(kThreads / kWarp == kWarp, "one warp scans the warp sums");

// Exclusive prefix sum of one value per thread over the CTA, in thread order; `total` gets the sum. Called
// once per launch (its shared memory is not reusable without another barrier).
__device__ int exclusive_block_sum(int value, int& total) {
  __shared__ int warp_sums[kThreads / kWarp];
  const int lane = threadIdx.x % kWarp;
  const int warp = threadIdx.x / kWarp;
  int inclusive = value;
  for (int offset = 1; offset < kWarp; offset *= 2) {
    const int below = __shfl_up_sync(kFullMask, inclusive, offset);
    if (lane >= offset) inclusive += below;
  }
  if (lane == kWarp - 1) warp_sums[warp] = inclusive;
  __syncthreads();
  if (warp == 0) {
    int sum = warp_sums[lane];
    for (int offset = 1; offset < kWarp; offset *= 2) {
      const int below = __shfl_up_sync(kFullMask, sum, offset);
      if (lane >= offset) sum += below;
    }
    warp_sums[lane] = sum;  // inclusive over warps
  }
  __syncthreads();
  total = warp_sums[kWarp - 1];
  return (warp > 0 ? warp_sums[warp - 1] : 0) + inclusive - value;
}

__global__ void __launch_bounds__(kThreads, 1) varlen_tiles_kernel(const VarlenTileSpace space) {
  for (int bin = threadIdx.x; bin < space.num_bins; bin += kThreads) space.bins[bin] = 0;
  if (threadIdx.x == 0) *space.tile_counter = 0;  // the forward's claims
  __syncthreads();

  for (int batch = threadIdx.x; batch < space.batch; batch += kThreads) count_varlen_sequence(space, batch);
  __syncthreads();

  const VarlenBinRun run = varlen_bin_run(space.num_bins, threadIdx.x, kThreads);
  int total_units = 0;
  place_varlen_run(space, run, exclusive_block_sum(varlen_run_units(space, run), total_units));
  if (threadIdx.x == 0) *space.num_tiles = varlen_listed_tiles(space, total_units);
  __syncthreads();

  // A warp's lanes take a sequence each, then fill each of the warp's sequences together: a long
  // sequence's run of units spreads over all 32 lanes.
  const int lane = threadIdx.x % kWarp;
  for (int base = threadIdx.x - lane; base < space.batch; base += kThreads) {
    const int batch = base + lane;
    const VarlenUnit unit = batch < space.batch ? take_varlen_units(space, batch) : VarlenUnit{batch, 0, 0, 1};
    for (int source = 0; source < kWarp; ++source) {
      const VarlenUnit shared{__shfl_sync(kFullMask, unit.batch, source), __shfl_sync(kFullMask, unit.first_unit, source),
                              __shfl_sync(kFullMask, unit.blocks, source),
                              __shfl_sync(kFullMask, unit.heads_per_group, source)};
      fill_varlen_units(space, shared, lane, kWarp);
    }
  }
}

}  // namespace

cudaError_t launch_varlen_tiles(const VarlenTileSpace& space, cudaStream_t stream) {
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(1);
  config.blockDim = dim3(kThreads);
  config.stream = stream;
  return cudaLaunchKernelEx(&config, varlen_tiles_kernel, space);
}

}  // namespace flash4
