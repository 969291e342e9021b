// The backward kernel's mbarriers: K/V loaded once per tile (a CTA of the persistent grid runs several),
// then a ring of (Q, dO, LSE, D) stages, one per query block step, which runs on across the CTA's tiles.
#pragma once

#include <cstdint>

#include "kernels/common/bwd_tile_config.hpp"
#include "kernels/common/bwd_tile_handout.hpp"
#include "kernels/sm90/ring_position.cuh"

namespace flash4::sm90 {

template <int kStages>
struct BwdBarriers {
  uint64_t kv_full;
  uint64_t kv_empty;  // one arrival per consumer thread: the tile's K / V may be overwritten by the next tile's
  uint64_t stage_full[kStages];
  uint64_t stage_empty[kStages];  // kBwdStageReleaseArrivals from each CTA (paired: both CTAs)
  // Paired CTAs (dq_writer.cuh): in rank 0, the partner's dQ partial has arrived in the partner buffer;
  // in rank 1, rank 0 has taken it, so the staging buffer is free again.
  uint64_t partner_dq_full;
  uint64_t partner_dq_taken;
  // The tile hand-out (kernel.cuh): the scheduler has resolved tile slot s; every reader is done with it.
  uint64_t tile_published[BwdTileHandout::kSlots];
  uint64_t tile_free[BwdTileHandout::kSlots];
  uint64_t tile_loaded;  // the loader has issued a tile's loads (kBwdLateClaim)
};

// Named barriers (id 0 is __syncthreads).
//  - Split by keys: kDsReady is among the two consumer warpgroups. The dQ hand-off between the consumers
//    and the dQ writer warps (consumers sync on an empty barrier and arrive on a full one, a writer the
//    other way round, so no consumer ever waits for a reduce-add to be issued) is per warpgroup when
//    unpaired: each warpgroup waits only for the staging buffer to be free again, not for the other
//    warpgroup, so the warpgroups meet once per step (kDsReady), not twice; the writer waits for both
//    warpgroups' slices and adds the buffer whole. (Both warpgroups on one 288-thread hand-off barrier,
//    against one per warpgroup: see docs/design.md.)
//    With two writers, odd steps hand off through their own full barriers: a writer waiting for its next
//    step must not be released by the other's. The empty barriers need no second set: their arrivals
//    alternate with the consumers' syncs, since a writer can only read step t + 1 after the consumers
//    passed the empty barrier for it. Paired, one hand-off (kDqFull, kDqEmpty) covers both warpgroups:
//    with one dS^T buffer, its empty barrier is also where the warpgroups' dQ products of step t are
//    known to be complete before step t + 1's dS^T is written.
//    The writers hand the buffer back after every step, and the consumers take it once more after their
//    last tile, so that no arrival is left pending when the CTA exits.
//  - Split by roles: warpgroup 0 arrives on kProbsReady and warpgroup 1 syncs on it; both sync on
//    kDsReady. Deterministic mode adds the dQ turn barriers.
enum class BwdBarrierId : int {
  kDsReady = 1,       // dS^T is complete in shared memory
  kDqFull = 2,        // paired: both warpgroups' dQ slices are in the staging buffer
  kDqEmpty = 3,       // paired: the writer's reduce-adds have read the staging buffer: it may be overwritten
  kProbsReady = 4,    // P is in shared memory for warpgroup 1
  kDqTurn = 5,        // 5 + warpgroup: the warpgroup's first thread saw this CTA's turn to add dQ
  kDqAdded = 7,       // both warpgroups' dQ reductions of the step are issued and fenced
  kDqSliceFull = 8,   // 8 + 2 * (writer of the step) + warpgroup: the warpgroup's dQ slice is staged
  kDqSliceEmpty = 12, // 12 + warpgroup: the writer has read the warpgroup's slice
};
inline constexpr int kBwdConsumerThreads = 2 * kWarpgroupThreads;

// CMake FLASH4_BWD_RELEASE_PER_THREAD (default ON): every consumer thread arrives on stage_empty; OFF, one
// lane per warp arrives after __syncwarp. Both are ordered in the PTX memory model, but compute-sanitizer
// racecheck follows only the per-thread form: with the warp-level arrive it reports the loader's LSE / D
// bulk copies into a reused stage against the consumers' reads of its previous use. Per thread against
// per warp (H200, bf16, 512..16K tokens, two repeats each, bench/results/h200-2026-12-03-bwd-release-ab-
// de89079.json): geometric mean +0.2%; D = 64 causal -0.1% to -2.1%, D = 128 -0.8% to +5.3%.
#ifndef FLASH4_BWD_RELEASE_PER_THREAD_ENABLED
#define FLASH4_BWD_RELEASE_PER_THREAD_ENABLED 1
#endif
inline constexpr bool kBwdReleasePerThread = FLASH4_BWD_RELEASE_PER_THREAD_ENABLED != 0;
// Arrivals that complete one CTA's stage_empty phase, from one CTA's consumers.
inline constexpr int kBwdStageReleaseArrivals = kBwdReleasePerThread ? kBwdConsumerThreads : kBwdConsumerThreads / 32;
// The producer warpgroup's warps: warp 0 issues the loads, warps from kBwdDqWriterWarp write dQ (see
// bwd_dq_writer_warps), warp 3 hands out the tiles (kernel.cuh), the rest idle.
inline constexpr int kBwdLoaderWarp = 0;
inline constexpr int kBwdDqWriterWarp = 1;
inline constexpr int kBwdSchedulerWarp = 3;

// dQ writer warps, taking the steps in turn: two unless paired. A writer in deterministic mode waits for
// its adds to land before it passes the turn on, and that wait (with the turn's acquire) can take as long
// as a step; a second writer takes the next step meanwhile, so the staging buffer comes back to the
// consumers once per step. Paired, the partner hand-off (dq_writer.cuh) is written for one.
constexpr int bwd_dq_writer_warps(int cluster_ctas) { return cluster_ctas == 1 ? 2 : 1; }
static_assert(kBwdDqWriterWarp + 2 <= kBwdSchedulerWarp, "the scheduler warp writes no dQ");

// The dQ hand-off barriers of one CTA's consumer warpgroup (see BwdBarrierId): per warpgroup unless paired.
template <int kClusterCtas>
struct DqHandoff {
  static constexpr bool kPerWarpgroup = kClusterCtas == 1;
  static constexpr int kWriters = bwd_dq_writer_warps(kClusterCtas);
  static constexpr int kWarpgroups = kBwdConsumerThreads / kWarpgroupThreads;
  static constexpr int kBarrierSets = kPerWarpgroup ? kWarpgroups : 1;  // a writer syncs / arrives on each
  // The barriers' threads: the consumer warpgroup (paired, both) plus one writer warp.
  static constexpr int kThreads = kBwdConsumerThreads / kBarrierSets + 32;
  // The barrier that hands warpgroup `warpgroup`'s slice of step `step` to the step's writer.
  __device__ __forceinline__ static int full(int step, int warpgroup) {
    if constexpr (!kPerWarpgroup) return int(BwdBarrierId::kDqFull);
    return int(BwdBarrierId::kDqSliceFull) + kWarpgroups * (step % kWriters) + warpgroup;
  }
  // The barrier that hands warpgroup `warpgroup`'s slice back once its writer has read it.
  __device__ __forceinline__ static int empty(int warpgroup) {
    if constexpr (!kPerWarpgroup) return int(BwdBarrierId::kDqEmpty);
    return int(BwdBarrierId::kDqSliceEmpty) + warpgroup;
  }
};
static_assert(int(BwdBarrierId::kDqSliceFull) + 2 * DqHandoff<1>::kWarpgroups == int(BwdBarrierId::kDqSliceEmpty) &&
                  int(BwdBarrierId::kDqSliceEmpty) + DqHandoff<1>::kWarpgroups <= 16,
              "named barrier ids: a full barrier per (writer, warpgroup), an empty one per warpgroup, 16 in all");

}  // namespace flash4::sm90
