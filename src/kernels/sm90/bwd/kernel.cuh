// The main backward kernel: warpgroup 0 produces (one thread issues the loads, warps 1 and 2 write dQ when
// the consumers split by keys, warp 1 alone when paired; the warpgroup gives its registers to the
// consumers), warpgroups 1 and 2 consume (consumer.cuh or consumer_roles.cuh, by the head dim's
// BwdSplit). One CTA per (key block, sequence, kv head), launched in the order of tile_work.cuh.
#pragma once

#include <cstdint>

#include "kernels/common/bwd_params.hpp"
#include "kernels/sm90/bwd/consumer.cuh"
#include "kernels/sm90/bwd/consumer_roles.cuh"
#include "kernels/sm90/bwd/dq_writer.cuh"
#include "kernels/sm90/bwd/pipeline.cuh"
#include "kernels/sm90/bwd/producer.cuh"
#include "kernels/sm90/bwd/tile_work.cuh"
#include "kernels/sm90/ptx/cluster.cuh"
#include "kernels/sm90/ptx/mbarrier.cuh"
#include "kernels/sm90/ptx/shared.cuh"
#include "kernels/sm90/ptx/sync.cuh"
#include "kernels/sm90/ptx/tma.cuh"

namespace flash4::sm90 {

// Register split after setmaxnreg, as in the forward: 128 x 24 + 256 x 240 = 384 x 168, the CTA's pool.
inline constexpr int kBwdProducerRegisters = 24;
inline constexpr int kBwdConsumerRegisters = 240;

// kSoftcap picks the per-step schedule (softcap's tanh feeds both P and dS); it is a kernel parameter
// rather than a branch inside one kernel because two main loops in one kernel share one register
// allocation and spill.
template <class Element, int kHeadDim, bool kSoftcap>
__global__ void __launch_bounds__(bwd_tile_config(kHeadDim).threads(), 1)
    bwd_kernel(const __grid_constant__ BwdKernelParams params) {
  constexpr BwdTileConfig kCfg = bwd_tile_config(kHeadDim);
  constexpr bool kPaired = kCfg.cluster_ctas == 2;
  static_assert(kCfg.consumer_warpgroups == 2, "both consumers are written for two warpgroups");
  constexpr int kRegistersAtLaunch = (65536 / kCfg.threads()) / 8 * 8;
  static_assert(kBwdProducerRegisters * kWarpgroupThreads + kBwdConsumerRegisters * 2 * kWarpgroupThreads <=
                    kRegistersAtLaunch * kCfg.threads(),
                "register split exceeds the CTA's launch allocation: setmaxnreg.inc would never return");

  const BwdTileWork work = resolve_bwd_tile<kHeadDim>(params, blockIdx.x);
  if (!work.has_keys()) return;  // a varlen sequence shorter than this key block (pair): nothing to write

  extern __shared__ char smem_raw[];
  // Aligned as a shared-memory offset (align_shared): the consumers' reads of the tile's fields
  // (shared_work) are then 32-bit shared loads, not generic loads that keep a 64-bit pointer live across
  // their loop.
  char* smem = align_shared<kSmemAlignment>(smem_raw);
  auto* bars = reinterpret_cast<BwdBarriers<kCfg.stages>*>(smem + kCfg.barrier_offset());
  // The roles read the tile's fields from shared memory: kept in registers they would stay live across
  // the consumers' main loop, where registers are scarcest (and memory clobbers in the loop stop the
  // compiler from caching them there).
  auto* shared_work = reinterpret_cast<BwdTileWork*>(smem + kCfg.barrier_offset() + sizeof(BwdBarriers<kCfg.stages>));
  static_assert(sizeof(BwdBarriers<kCfg.stages>) + sizeof(BwdTileWork) <= kSmemBarrierBytes, "barrier area too small");
  if (threadIdx.x == 0) {
    *shared_work = work;
    tma_prefetch_descriptor(&params.tma_q);
    tma_prefetch_descriptor(&params.tma_do);
    tma_prefetch_descriptor(&params.tma_k);
    tma_prefetch_descriptor(&params.tma_v);
    if constexpr (kCfg.split == BwdSplit::kKeys) tma_prefetch_descriptor(&params.tma_dq_accum);
    mbarrier_init(&bars->kv_full, 1);
    for (int stage = 0; stage < kCfg.stages; ++stage) {
      mbarrier_init(&bars->stage_full[stage], 1);
      mbarrier_init(&bars->stage_empty[stage], kCfg.consumer_warpgroups * 4 * kCfg.cluster_ctas);
    }
    mbarrier_init(&bars->partner_dq_full, 1);
    mbarrier_init(&bars->partner_dq_taken, 1);
    mbarrier_init_fence();
  }
  // Paired, the partner's barriers must be initialized before this CTA's multicasts and arrivals reach them.
  if constexpr (kPaired) cluster_sync_all();
  else __syncthreads();

  const int warpgroup = threadIdx.x / kWarpgroupThreads;
  if (warpgroup == 0) {
    warpgroup_release_registers<kBwdProducerRegisters>();
    const int warp = threadIdx.x / 32;
    if (warp == kBwdLoaderWarp) {
      if (threadIdx.x % 32 == 0) BwdProducer<kHeadDim>::run(params, *shared_work, smem, bars);
    } else if (warp >= kBwdDqWriterWarp && warp < kBwdDqWriterWarp + bwd_dq_writer_warps(kCfg.cluster_ctas)) {
      if constexpr (kCfg.split == BwdSplit::kKeys) {
        BwdDqWriter<kHeadDim>::run(params, *shared_work, smem, bars, warp - kBwdDqWriterWarp);
      }
    }
  } else {
    warpgroup_claim_registers<kBwdConsumerRegisters>();
    if constexpr (kCfg.split == BwdSplit::kKeys) {
      BwdConsumer<Element, kHeadDim> consumer{{}, warpgroup - 1, smem, bars};
      consumer.template run<kSoftcap>(params, *shared_work);
    } else {
      BwdRolesConsumer<Element, kHeadDim> consumer{{}, warpgroup - 1, smem, bars};
      consumer.template run<kSoftcap>(params, *shared_work);
    }
  }
  // Paired, no CTA leaves while its partner may still multicast into it, arrive on its barriers or copy
  // into its partner buffer.
  if constexpr (kPaired) cluster_sync_all();
}

}  // namespace flash4::sm90
