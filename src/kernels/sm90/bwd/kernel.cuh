// The main backward kernel: warpgroup 0 produces (one thread issues the loads, warps 1 and 2 write dQ when
// the consumers split by keys; the warpgroup gives its registers to the consumers), warpgroups 1 and 2
// consume (consumer.cuh, consumer_key_columns.cuh or consumer_roles.cuh, by the head dim's BwdSplit); warp
// 3 of the producer warpgroup schedules. A persistent grid: each CTA runs tiles (key block, sequence, kv
// head) until none is left (the hand-out below), so one tile's dK / dV stores overlap the next tile's K / V
// and first stage loads, and the launch, barrier set-up and register hand-over are paid once per SM, not
// per tile.
#pragma once

#include <cstdint>

#include "kernels/common/bwd_tile_handout.hpp"
#include "kernels/sm90/bwd/consumer.cuh"
#include "kernels/sm90/bwd/consumer_key_columns.cuh"
#include "kernels/sm90/bwd/consumer_roles.cuh"
#include "kernels/sm90/bwd/dq_writer.cuh"
#include "kernels/sm90/bwd/pipeline.cuh"
#include "kernels/sm90/bwd/producer.cuh"
#include "kernels/sm90/bwd/tile_work.cuh"
#include "kernels/sm90/ptx/mbarrier.cuh"
#include "kernels/sm90/ptx/shared.cuh"
#include "kernels/sm90/ptx/sync.cuh"
#include "kernels/sm90/ptx/tma.cuh"
#include "launch/bwd_params.hpp"

namespace flash4::sm90 {

// Register split after setmaxnreg, as in the forward: 128 x 24 + 256 x 240 = 384 x 168, the CTA's pool.
inline constexpr int kBwdProducerRegisters = 24;
inline constexpr int kBwdConsumerRegisters = 240;

// The tile hand-out. Each CTA claims its tiles from a global counter (tile_counter), so tiles start in
// tile_work.cuh's order (the heads' Q / dO shared in L2; within a head longest-first, or in deterministic
// mode shortest-first: bwd_key_block_of) and the CTAs stay balanced however the tiles' lengths vary
// (causal, window, varlen). A scheduler thread (warp
// kBwdSchedulerWarp) claims and resolves the CTA's tile number i into slot i % 2 once the readers are done
// with tile i - 2 and the loader has issued tile i - 1's loads (the late claim, bwd_tile_handout.hpp), so
// the next tile's K / V loads overlap the current tile's last steps; it then arrives on tile_published. Every other role
// reads the slot and arrives on tile_free when done with it. The slots are in shared memory: a copy in
// registers would take the consumers' scarce ones, and resolving in the loader's or the consumers' own
// threads spilled.
struct BwdTileSlots {
  BwdTileWork work[BwdTileHandout::kSlots];
  int valid[BwdTileHandout::kSlots];  // 0: no tile left (the roles stop)
};

// Threads that arrive on tile_free: the loader thread, the consumers and the dQ writers.
constexpr int bwd_tile_readers(const BwdTileConfig& cfg) {
  return 1 + kBwdConsumerThreads + (cfg.split == BwdSplit::kKeys ? 32 * kBwdDqWriterWarps : 0);
}

extern __shared__ char bwd_dynamic_smem[];

// The barriers rebuilt from the dynamic shared-memory symbol where they are used after a role's main
// loop: a pointer kept from before the loop stays live across it, and the 24-register dQ writers spilled
// it.
template <int kHeadDim>
__device__ __forceinline__ BwdBarriers<bwd_tile_config(kHeadDim).stages>* fresh_barriers() {
  char* base = bwd_dynamic_smem;
  asm volatile("" : "+l"(base));
  return reinterpret_cast<BwdBarriers<bwd_tile_config(kHeadDim).stages>*>(align_shared<kSmemAlignment>(base) +
                                                                           bwd_tile_config(kHeadDim).barrier_offset());
}

// The CTA's next tile. Every tile is claimed from the counter, the first too: claims then go to running
// CTAs in index order, so in deterministic mode a tile's predecessors in the dQ turns are always claimed,
// hence running or done, even when other work holds some SMs and part of the grid has not started.
__device__ __forceinline__ int claim_tile(const BwdKernelParams& p) { return atomicAdd(p.tile_counter, 1); }

// The scheduler thread. The K / V barriers complete a phase per tile with steps (the others load no K / V),
// so it counts those tiles for the phase the loader and the consumers wait on.
template <int kHeadDim, bool kPersistent>
__device__ void schedule_bwd_tiles(const BwdKernelParams& p, BwdTileSlots* slots,
                                   BwdBarriers<bwd_tile_config(kHeadDim).stages>* bars) {
  int kv_loads = 0;
  for (int number = 0;; ++number) {
    const int slot = BwdTileHandout::slot(number);
    // Claimed only once the slot is free (the readers have started the tile before the previous one) and
    // the previous tile's loads are issued (the late claim).
    if (BwdTileHandout::reuses_slot(number)) mbarrier_wait(&bars->tile_free[slot], BwdTileHandout::free_parity(number));
    if (number > 0) mbarrier_wait(&bars->tile_loaded, BwdTileHandout::loaded_parity(number - 1));
    const int tile = claim_tile(p);
    const bool valid = tile < p.num_tiles;
    slots->valid[slot] = valid;
    if (valid) {
      BwdTileWork& work = slots->work[slot];
      resolve_bwd_tile<kHeadDim>(p, tile, work);
      work.kv_phase = BwdTileHandout::kv_full_parity(kv_loads);
      if (work.has_keys() && work.num_steps() > 0) ++kv_loads;
    }
    mbarrier_arrive(&bars->tile_published[slot]);
    if (!valid || !kPersistent) return;
  }
}

// Every other role: `body(work)` for each of the CTA's tiles with keys (one tile unless kPersistent), then
// `after_tile()` for every tile.
template <int kHeadDim, bool kPersistent, class Body, class AfterTile>
__device__ __forceinline__ void for_each_bwd_tile(BwdTileSlots* slots, const Body& body, const AfterTile& after_tile) {
  if constexpr (!kPersistent) {
    mbarrier_wait(&fresh_barriers<kHeadDim>()->tile_published[0], BwdTileHandout::published_parity(0));
    if (slots->valid[0] && slots->work[0].has_keys()) body(slots->work[0]);
  } else {
    for (int number = 0;; ++number) {
      const int slot = BwdTileHandout::slot(number);
      mbarrier_wait(&fresh_barriers<kHeadDim>()->tile_published[slot], BwdTileHandout::published_parity(number));
      if (!slots->valid[slot]) return;
      const BwdTileWork& work = slots->work[slot];
      if (work.has_keys()) body(work);
      after_tile();
      mbarrier_arrive(&fresh_barriers<kHeadDim>()->tile_free[slot]);
    }
  }
}

// kSoftcap picks the per-step schedule (softcap's tanh feeds both P and dS); it is a kernel parameter
// rather than a branch inside one kernel because two main loops in one kernel share one register
// allocation and spill.
template <class Element, int kHeadDim, bool kSoftcap>
__global__ void __launch_bounds__(bwd_tile_config(kHeadDim).threads(), 1)
    bwd_kernel(const __grid_constant__ BwdKernelParams params) {
  constexpr BwdTileConfig kCfg = bwd_tile_config(kHeadDim);
  constexpr bool kPersistent = bwd_persistent_kernel(kHeadDim, kSoftcap);
  static_assert(kCfg.consumer_warpgroups == 2, "both consumers are written for two warpgroups");
  constexpr int kRegistersAtLaunch = (65536 / kCfg.threads()) / 8 * 8;
  static_assert(kBwdProducerRegisters * kWarpgroupThreads + kBwdConsumerRegisters * 2 * kWarpgroupThreads <=
                    kRegistersAtLaunch * kCfg.threads(),
                "register split exceeds the CTA's launch allocation: setmaxnreg.inc would never return");

  // Aligned as a shared-memory offset (align_shared): the consumers' reads of the tile's fields
  // (BwdTileSlots) are then 32-bit shared loads, not generic loads that keep a 64-bit pointer live across
  // their loop.
  char* smem = align_shared<kSmemAlignment>(bwd_dynamic_smem);
  auto* bars = reinterpret_cast<BwdBarriers<kCfg.stages>*>(smem + kCfg.barrier_offset());
  auto* slots = reinterpret_cast<BwdTileSlots*>(smem + kCfg.barrier_offset() + sizeof(BwdBarriers<kCfg.stages>));
  static_assert(sizeof(BwdBarriers<kCfg.stages>) + sizeof(BwdTileSlots) <= kBwdSmemControlBytes,
                "shared-memory control area too small");
  if (threadIdx.x == 0) {
    tma_prefetch_descriptor(&params.tma_q);
    tma_prefetch_descriptor(&params.tma_do);
    tma_prefetch_descriptor(&params.tma_k);
    tma_prefetch_descriptor(&params.tma_v);
    mbarrier_init(&bars->kv_full, 1);
    mbarrier_init(&bars->kv_empty, kBwdConsumerThreads);
    for (int stage = 0; stage < kCfg.stages; ++stage) {
      mbarrier_init(&bars->stage_full[stage], 1);
      mbarrier_init(&bars->stage_empty[stage], kBwdStageReleaseArrivals);
    }
    for (int slot = 0; slot < BwdTileHandout::kSlots; ++slot) {
      mbarrier_init(&bars->tile_published[slot], 1);
      mbarrier_init(&bars->tile_free[slot], bwd_tile_readers(kCfg));
    }
    mbarrier_init(&bars->tile_loaded, 1);
    mbarrier_init_fence();
  }
  __syncthreads();

  // At block_m = 64 read from lane 0, so that the compiler knows it is the same in every lane of a warp:
  // what the consumers derive from it (the wgmma descriptors above all) then stays in uniform registers.
  // Computed per lane, every descriptor of a K or V operand was rebuilt in vector registers and moved over
  // (R2UR) before each wgmma there, eight instructions between consecutive issues. At block_m = 128 (D =
  // 64) the descriptors are built before the issues either way, and the uniform index spilled.
  const int thread_warpgroup = int(threadIdx.x / kWarpgroupThreads);
  const int warpgroup = kCfg.block_m == 64 ? __shfl_sync(0xffffffffu, thread_warpgroup, 0) : thread_warpgroup;
  if (warpgroup == 0) {
    warpgroup_release_registers<kBwdProducerRegisters>();
    const int warp = threadIdx.x / 32;
    if (warp == kBwdLoaderWarp) {
      if (threadIdx.x % 32 == 0) {
        BwdProducer<kHeadDim> producer{smem, bars};
        // The late claim waits for the loader to have issued the tile's loads.
        const auto loaded = [&] { mbarrier_arrive(&fresh_barriers<kHeadDim>()->tile_loaded); };
        for_each_bwd_tile<kHeadDim, kPersistent>(slots, [&](const BwdTileWork& work) { producer.run(params, work); },
                                                 loaded);
      }
    } else if (warp == kBwdSchedulerWarp) {
      if (threadIdx.x % 32 == 0) schedule_bwd_tiles<kHeadDim, kPersistent>(params, slots, bars);
    } else if (warp >= kBwdDqWriterWarp && warp < kBwdDqWriterWarp + kBwdDqWriterWarps) {
      if constexpr (kCfg.split == BwdSplit::kKeys) {
        BwdDqWriter<kHeadDim> writer{smem, warp - kBwdDqWriterWarp};
        writer.start();
        for_each_bwd_tile<kHeadDim, kPersistent>(slots, [&](const BwdTileWork& work) { writer.run(params, work); },
                                                 [] {});
      }
    }
  } else {
    warpgroup_claim_registers<kBwdConsumerRegisters>();
    if constexpr (kCfg.split == BwdSplit::kKeys) {
      BwdConsumer<Element, kHeadDim> consumer{{}, warpgroup - 1, smem, bars};
      for_each_bwd_tile<kHeadDim, kPersistent>(
          slots, [&](const BwdTileWork& work) { consumer.template run<kSoftcap>(params, work); }, [] {});
      consumer.finish();
    } else if constexpr (kCfg.split == BwdSplit::kKeyColumns) {
      BwdKeyColumnsConsumer<Element, kHeadDim> consumer{{}, warpgroup - 1, smem, bars};
      for_each_bwd_tile<kHeadDim, kPersistent>(
          slots, [&](const BwdTileWork& work) { consumer.template run<kSoftcap>(params, work); }, [] {});
    } else {
      BwdRolesConsumer<Element, kHeadDim> consumer{{}, warpgroup - 1, smem, bars};
      for_each_bwd_tile<kHeadDim, kPersistent>(
          slots, [&](const BwdTileWork& work) { consumer.template run<kSoftcap>(params, work); }, [] {});
    }
  }
}

}  // namespace flash4::sm90
