// The backward kernel's mbarriers: K/V loaded once per CTA, then a ring of (Q, dO, LSE, D) stages, one
// per query block step.
#pragma once

#include <cstdint>

#include "kernels/common/bwd_tile_config.hpp"
#include "kernels/sm90/ring_position.cuh"

namespace flash4::sm90 {

template <int kStages>
struct BwdBarriers {
  uint64_t kv_full;
  uint64_t stage_full[kStages];
  uint64_t stage_empty[kStages];  // one arrival per consumer warp
};

// Named barriers among the two consumer warpgroups (id 0 is __syncthreads).
enum class BwdBarrierId : int {
  kDsReady = 1,   // both halves of dS^T are in shared memory, and the dQ staging buffer is free again
  kDqStaged = 2,  // both column halves of dQ are in the staging buffer
};

}  // namespace flash4::sm90
