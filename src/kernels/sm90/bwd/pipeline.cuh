// The backward kernel's mbarriers: K/V loaded once per tile (a CTA of the persistent grid runs several),
// then a ring of (Q, dO, LSE, D) stages, one per query block step, which runs on across the CTA's tiles.
#pragma once

#include <cstdint>

#include "kernels/common/bwd_tile_handout.hpp"
#include "kernels/sm90/ring_position.cuh"
#include "launch/bwd_tile_config.hpp"

namespace flash4::sm90 {

template <int kStages>
struct BwdBarriers {
  uint64_t kv_full;
  uint64_t kv_empty;  // one arrival per consumer thread: the tile's K / V may be overwritten by the next tile's
  uint64_t stage_full[kStages];
  uint64_t stage_empty[kStages];  // one arrival per consumer thread
  // The tile hand-out (kernel.cuh): the scheduler has resolved tile slot s; every reader is done with it.
  uint64_t tile_published[BwdTileHandout::kSlots];
  uint64_t tile_free[BwdTileHandout::kSlots];
  uint64_t tile_loaded;  // the loader has issued a tile's loads (the late claim, bwd_tile_handout.hpp)
};

// Named barriers (id 0 is __syncthreads).
//  - Split by keys: kDsReady is among the two consumer warpgroups. The dQ hand-off between the consumers
//    and the dQ writer warps (consumers sync on an empty barrier and arrive on a full one, a writer the
//    other way round, so no consumer ever waits for a reduce-add to be issued) is per warpgroup: each
//    warpgroup waits only for its slice of the staging buffer to be free again, not for the other
//    warpgroup, so the warpgroups meet once per step (kDsReady), not twice; the writer waits for both
//    warpgroups' slices and adds the buffer whole (one joint hand-off was slower: docs/experiments.md,
//    "per-warpgroup dQ hand-off").
//    With two writers, odd steps hand off through their own full barriers: a writer waiting for its next
//    step must not be released by the other's. The empty barriers need no second set: their arrivals
//    alternate with the consumers' syncs, since a writer can only read step t + 1 after the consumers
//    passed the empty barrier for it.
//    The writers hand the buffer back after every step, and the consumers take it once more after their
//    last tile, so that no arrival is left pending when the CTA exits.
//  - Split by key columns: both warpgroups sync on kDsReady; each syncs on its own kProbsStored before
//    its dV^T product reads the P^T rows its warps stored. Deterministic mode adds the dQ turn barriers.
//  - Split by roles: warpgroup 0 arrives on kProbsReady and warpgroup 1 syncs on it; both sync on
//    kDsReady. Deterministic mode adds the dQ turn barriers.
enum class BwdBarrierId : int {
  kDsReady = 1,       // dS^T is complete in shared memory
  kProbsStored = 2,   // 2 + warpgroup: the warpgroup's P^T rows are in shared memory (split by key columns)
  kProbsReady = 4,    // P is in shared memory for warpgroup 1
  kDqTurn = 5,        // 5 + warpgroup: the warpgroup's first thread saw this CTA's turn to add dQ
  kDqAdded = 7,       // both warpgroups' dQ reductions of the step are issued and fenced
  kDqSliceFull = 8,   // 8 + 2 * (writer of the step) + warpgroup: the warpgroup's dQ slice is staged
  kDqSliceEmpty = 12, // 12 + warpgroup: the writer has read the warpgroup's slice
};
inline constexpr int kBwdConsumerThreads = 2 * kWarpgroupThreads;

// Every consumer thread arrives on stage_empty. One arrival per warp after __syncwarp would be ordered
// too in the PTX memory model, but compute-sanitizer racecheck does not follow it: it then reports the
// loader's LSE / D bulk copies into a reused stage against the consumers' reads of its previous use. The
// per-thread form costs nothing measurable (docs/experiments.md, "stage release per thread").
inline constexpr int kBwdStageReleaseArrivals = kBwdConsumerThreads;
// The producer warpgroup's warps: warp 0 issues the loads, warps from kBwdDqWriterWarp write dQ (see
// kBwdDqWriterWarps), warp 3 hands out the tiles (kernel.cuh).
inline constexpr int kBwdLoaderWarp = 0;
inline constexpr int kBwdDqWriterWarp = 1;
inline constexpr int kBwdSchedulerWarp = 3;

// dQ writer warps, taking the steps in turn. A writer in deterministic mode waits for its adds to land
// before it passes the turn on, and that wait (with the turn's acquire) can take as long as a step; a
// second writer takes the next step meanwhile, so the staging buffer comes back to the consumers once
// per step.
inline constexpr int kBwdDqWriterWarps = 2;
static_assert(kBwdDqWriterWarp + kBwdDqWriterWarps <= kBwdSchedulerWarp, "the scheduler warp writes no dQ");

// The dQ hand-off barriers (see BwdBarrierId): a set per consumer warpgroup.
struct DqHandoff {
  static constexpr int kWriters = kBwdDqWriterWarps;
  static constexpr int kWarpgroups = kBwdConsumerThreads / kWarpgroupThreads;
  // The barriers' threads: one consumer warpgroup plus one writer warp.
  static constexpr int kThreads = kWarpgroupThreads + 32;
  // The barrier that hands warpgroup `warpgroup`'s slice of step `step` to the step's writer.
  __device__ __forceinline__ static int full(int step, int warpgroup) {
    return int(BwdBarrierId::kDqSliceFull) + kWarpgroups * (step % kWriters) + warpgroup;
  }
  // The barrier that hands warpgroup `warpgroup`'s slice back once its writer has read it.
  __device__ __forceinline__ static int empty(int warpgroup) { return int(BwdBarrierId::kDqSliceEmpty) + warpgroup; }
};
static_assert(int(BwdBarrierId::kDqSliceFull) + DqHandoff::kWriters * DqHandoff::kWarpgroups ==
                      int(BwdBarrierId::kDqSliceEmpty) &&
                  int(BwdBarrierId::kDqSliceEmpty) + DqHandoff::kWarpgroups <= 16,
              "named barrier ids: a full barrier per (writer, warpgroup), an empty one per warpgroup, 16 in all");

}  // namespace flash4::sm90
