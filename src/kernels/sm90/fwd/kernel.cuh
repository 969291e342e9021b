// The persistent, warp-specialized forward kernel: warpgroup 0 produces (claims tiles and issues the TMA
// loads, with its registers given to the consumers), the other warpgroups consume. Each CTA's producer
// hands it tile after tile (producer.cuh) until the tile order is exhausted.
#pragma once

#include <cstdint>

#include "kernels/sm90/fwd/consumer.cuh"
#include "kernels/sm90/fwd/pipeline.cuh"
#include "kernels/sm90/fwd/producer.cuh"
#include "kernels/sm90/ptx/mbarrier.cuh"
#include "kernels/sm90/ptx/sync.cuh"
#include "kernels/sm90/ptx/tma.cuh"
#include "launch/fwd_params.hpp"
#include "launch/fwd_tile_config.hpp"

namespace flash4::sm90 {

template <class Element, int kHeadDim>
__global__ void __launch_bounds__(fwd_tile_config(kHeadDim).threads(), 1)
    fwd_kernel(const __grid_constant__ FwdKernelParams params) {
  using Layout = FwdSmemLayout<kHeadDim>;
  constexpr FwdTileConfig kCfg = Layout::kCfg;
  static_assert(kFwdProducerRegisters * kWarpgroupThreads +
                        kCfg.consumer_registers() * kCfg.consumer_warpgroups * kWarpgroupThreads <=
                    kCfg.registers_at_launch() * kCfg.threads(),
                "register split exceeds the CTA's launch allocation: setmaxnreg.inc would never return");

  extern __shared__ char smem_raw[];
  // Dynamic shared memory is only guaranteed 16-byte aligned; swizzle atoms need 1 KiB. Rounded as an
  // integer, not with align_shared (ptx/shared.cuh) as in the backward: that version was slower here.
  char* smem = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(smem_raw) + kSmemAlignment - 1) &
                                       ~uintptr_t(kSmemAlignment - 1));
  auto* bars = reinterpret_cast<FwdBarriers<kCfg.stages>*>(smem + Layout::kBarrierOffset);
  const int consumer_warps = kConsumerWarpsPerCta(kCfg.consumer_warpgroups);

  if (threadIdx.x == 0) {
    tma_prefetch_descriptor(&params.tma_q);
    tma_prefetch_descriptor(&params.tma_k);
    tma_prefetch_descriptor(&params.tma_v);
    mbarrier_init(&bars->q_full, 1);
    mbarrier_init(&bars->q_empty, consumer_warps);
    for (int stage = 0; stage < kCfg.stages; ++stage) {
      mbarrier_init(&bars->k_full[stage], 1);
      mbarrier_init(&bars->v_full[stage], 1);
      mbarrier_init(&bars->k_empty[stage], consumer_warps);
      mbarrier_init(&bars->v_empty[stage], consumer_warps);
    }
    for (int slot = 0; slot < TileHandout::kSlots; ++slot) {
      mbarrier_init(&bars->tile_published[slot], 1);
      mbarrier_init(&bars->tile_free[slot], kCfg.consumer_warpgroups * kWarpgroupThreads);
    }
    mbarrier_init_fence();
  }
  __syncthreads();

  const int warpgroup = threadIdx.x / kWarpgroupThreads;
  if (warpgroup == 0) {
    warpgroup_release_registers<kFwdProducerRegisters>();
    if (threadIdx.x == 0) FwdProducer<kHeadDim>{params, smem, bars}.run();
  } else {
    warpgroup_claim_registers<kCfg.consumer_registers()>();
    FwdConsumer<Element, kHeadDim> consumer{warpgroup - 1, smem, bars};
    consumer.run(params);
  }
}

}  // namespace flash4::sm90
