// Shared-memory layout of the forward kernel and the mbarrier pipeline state that walks its K/V ring.
#pragma once

#include <cstdint>

#include "kernels/common/fwd_tile_config.hpp"
#include "kernels/sm90/ring_position.cuh"

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
  static_assert(kCfg.o_bytes() / 2 % kSmemAlignment == 0, "each warpgroup's O staging must start on a swizzle atom");
};

// One full/empty pair per buffer: the producer's TMA completes `full`, the consumers' arrivals
// complete `empty`.
template <int kStages>
struct FwdBarriers {
  uint64_t q_full;
  uint64_t q_empty;
  uint64_t k_full[kStages];
  uint64_t k_empty[kStages];
  uint64_t v_full[kStages];
  uint64_t v_empty[kStages];
};

// Every consumer warp arrives once on an `empty` barrier (lane 0 after the warp's wgmma wait).
inline constexpr int kConsumerWarpsPerCta(int consumer_warpgroups) { return consumer_warpgroups * 4; }

}  // namespace flash4::sm90
