// The persistent, warp-specialized forward kernel: warpgroup 0 produces (TMA loads, with its registers
// given to the consumers), warpgroups 1 and 2 consume (the ping-pong pair). Every CTA walks the tile
// order with stride gridDim.x.
#pragma once

#include <cstdint>

#include "kernels/common/fwd_params.hpp"
#include "kernels/common/fwd_tile_config.hpp"
#include "kernels/sm90/fwd/consumer.cuh"
#include "kernels/sm90/fwd/pipeline.cuh"
#include "kernels/sm90/fwd/producer.cuh"
#include "kernels/sm90/ptx/mbarrier.cuh"
#include "kernels/sm90/ptx/sync.cuh"
#include "kernels/sm90/ptx/tma.cuh"

namespace flash4::sm90 {

// Register split after setmaxnreg. The pool is what the CTA got at launch (registers per thread under
// the __launch_bounds__ cap, a multiple of 8, times the threads), not the whole register file: a
// split that asks for more makes setmaxnreg.inc wait forever. 128 x 24 + 256 x 240 = 384 x 168.
inline constexpr int kProducerRegisters = 24;
inline constexpr int kConsumerRegisters = 240;
inline constexpr int kRegisterFileSize = 65536;  // 32-bit registers per SM

template <class Element, int kHeadDim>
__global__ void __launch_bounds__(fwd_tile_config(kHeadDim).threads(), 1)
    fwd_kernel(const __grid_constant__ FwdKernelParams params) {
  using Layout = FwdSmemLayout<kHeadDim>;
  constexpr FwdTileConfig kCfg = Layout::kCfg;
  static_assert(kCfg.consumer_warpgroups == 2, "the ping-pong schedule is written for two consumer warpgroups");
  constexpr int kRegistersAtLaunch = (kRegisterFileSize / kCfg.threads()) / 8 * 8;
  static_assert(kProducerRegisters * kWarpgroupThreads + kConsumerRegisters * 2 * kWarpgroupThreads <=
                    kRegistersAtLaunch * kCfg.threads(),
                "register split exceeds the CTA's launch allocation: setmaxnreg.inc would never return");

  extern __shared__ char smem_raw[];
  // Dynamic shared memory is only guaranteed 16-byte aligned; swizzle atoms need 1 KiB. Rounded as an
  // integer, not with align_shared (ptx/shared.cuh) as in the backward: that version measured 2.5% slower
  // at D = 64 (H200, 16K, one run: 417.2 -> 406.6 non-causal, 403.5 -> 394.1 causal; D = 128 / 256 within
  // 1.5%).
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
    mbarrier_init_fence();
  }
  __syncthreads();

  const int warpgroup = threadIdx.x / kWarpgroupThreads;
  if (warpgroup == 0) {
    warpgroup_release_registers<kProducerRegisters>();
    if (threadIdx.x == 0) FwdProducer<kHeadDim>::run(params, smem, bars);
  } else {
    warpgroup_claim_registers<kConsumerRegisters>();
    FwdConsumer<Element, kHeadDim> consumer{warpgroup - 1, smem, bars};
    consumer.run(params);
  }
}

}  // namespace flash4::sm90
