// Shared-memory layout of the forward kernel, the mbarriers that walk its K/V ring, and the tile slots by
// which the producer hands each claimed tile, resolved, to the consumers (kernels/common/tile_handout.hpp).
#pragma once

#include <cstdint>

#include "kernels/common/tile_handout.hpp"
#include "kernels/sm90/fwd/tile_work.cuh"
#include "kernels/sm90/ptx/mbarrier.cuh"
#include "kernels/sm90/ring_position.cuh"
#include "launch/fwd_tile_config.hpp"

namespace flash4::sm90 {

template <int kHeadDim>
struct FwdSmemLayout {
  static constexpr FwdTileConfig kCfg = fwd_tile_config(kHeadDim);
  static constexpr int kQOffset = 0;
  static constexpr int kKOffset = kQOffset + kCfg.q_bytes();
  static constexpr int kVOffset = kKOffset + kCfg.stages * kCfg.kv_stage_bytes();
  static constexpr int kOOffset = kVOffset + kCfg.stages * kCfg.kv_stage_bytes();  // if kCfg.stages_output()
  static constexpr int kBarrierOffset = kOOffset + (kCfg.stages_output() ? kCfg.o_bytes() : 0);
  static_assert(kKOffset % kSmemAlignment == 0 && kVOffset % kSmemAlignment == 0, "swizzle atoms need 1 KiB alignment");
  static_assert(kCfg.kv_stage_bytes() % kSmemAlignment == 0, "every K/V stage must start on a swizzle atom");
  static_assert(kCfg.o_bytes() / kCfg.consumer_warpgroups % kSmemAlignment == 0,
                "each warpgroup's O staging must start on a swizzle atom");
};

// One full/empty pair per buffer: the producer's TMA completes `full`, the consumers' arrivals complete
// `empty`. The tile slots hold the tiles the producer resolved (one without rows: no more tiles); the
// consumers read their fields where they use them, since the main loop has no registers to keep them.
template <int kStages>
struct FwdBarriers {
  uint64_t q_full;
  uint64_t q_empty;
  uint64_t k_full[kStages];
  uint64_t k_empty[kStages];
  uint64_t v_full[kStages];
  uint64_t v_empty[kStages];
  uint64_t tile_published[TileHandout::kSlots];
  uint64_t tile_free[TileHandout::kSlots];
  TileWork tile[TileHandout::kSlots];
};
static_assert(sizeof(FwdBarriers<4>) <= kSmemBarrierBytes, "barriers and slots overflow their shared-memory room");

// Every consumer warp arrives once on an `empty` barrier (lane 0 after the warp's wgmma wait: the reads it
// releases are the tensor cores').
inline constexpr int kConsumerWarpsPerCta(int consumer_warpgroups) { return consumer_warpgroups * 4; }

// The producer's side of the tile hand-out: the slot of the CTA's tile `number`, once the consumers are
// done with its previous tile (two tiles back: the producer runs at most one tile ahead), to be filled
// and then published.
template <int kStages>
__device__ __forceinline__ TileWork& free_slot(FwdBarriers<kStages>* bars, int number) {
  const int slot = TileHandout::slot(number);
  if (TileHandout::reuses_slot(number)) mbarrier_wait(&bars->tile_free[slot], TileHandout::free_parity(number));
  return bars->tile[slot];
}
template <int kStages>
__device__ __forceinline__ void publish_tile(FwdBarriers<kStages>* bars, int number) {
  mbarrier_arrive(&bars->tile_published[TileHandout::slot(number)]);
}

// A consumer's side: waits for the CTA's tile `number` and returns its slot, which stays the consumers'
// until every consumer thread has called free_tile.
template <int kStages>
__device__ __forceinline__ const TileWork& wait_tile(FwdBarriers<kStages>* bars, int number) {
  const int slot = TileHandout::slot(number);
  mbarrier_wait(&bars->tile_published[slot], TileHandout::published_parity(number));
  return bars->tile[slot];
}
// Every consumer thread arrives (tile_free counts the consumer threads), not one lane per warp after a
// __syncwarp: the producer's next write to the slot then follows each thread's own reads, which is what
// compute-sanitizer's racecheck follows.
template <int kStages>
__device__ __forceinline__ void free_tile(FwdBarriers<kStages>* bars, int number) {
  mbarrier_arrive(&bars->tile_free[TileHandout::slot(number)]);
}

}  // namespace flash4::sm90
