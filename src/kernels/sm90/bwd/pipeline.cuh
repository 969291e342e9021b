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
  uint64_t stage_empty[kStages];  // one arrival per consumer warp (paired: of both CTAs)
  // Paired CTAs (dq_writer.cuh): in rank 0, the partner's dQ partial has arrived in the partner buffer;
  // in rank 1, rank 0 has taken it, so the staging buffer is free again.
  uint64_t partner_dq_full;
  uint64_t partner_dq_taken;
};

// Named barriers (id 0 is __syncthreads).
//  - Split by keys: kDsReady is among the two consumer warpgroups; the dQ pair is the hand-off between
//    the consumers and the dQ writer warp (consumers sync on kDqEmpty and arrive on kDqFull, the writer
//    the other way round), so no consumer ever waits for a reduce-add to be issued.
//  - Split by roles: warpgroup 0 arrives on kProbsReady and warpgroup 1 syncs on it; both sync on
//    kDsReady. Deterministic mode adds the dQ turn barriers.
enum class BwdBarrierId : int {
  kDsReady = 1,     // dS^T is complete in shared memory
  kDqFull = 2,      // both column halves of dQ are in the staging buffer
  kDqEmpty = 3,     // the writer's reduce-adds have read the staging buffer: it may be overwritten
  kProbsReady = 4,  // P is in shared memory for warpgroup 1
  kDqTurn = 5,      // 5 + warpgroup: the warpgroup's first thread saw this CTA's turn to add dQ
  kDqAdded = 7,     // both warpgroups' dQ reductions of the step are issued and fenced
};
inline constexpr int kBwdConsumerThreads = 2 * kWarpgroupThreads;
inline constexpr int kBwdDqHandoffThreads = kBwdConsumerThreads + 32;  // the consumers plus the writer warp
// The producer warpgroup's warps: warp 0 issues the loads, warp 1 writes dQ, the other two idle.
inline constexpr int kBwdLoaderWarp = 0;
inline constexpr int kBwdDqWriterWarp = 1;

}  // namespace flash4::sm90
