// The dQ writers: warps 1 and 2 of the producer warpgroup, taking the steps in turn (kBwdDqWriterWarps),
// counting the CTA's steps across its tiles. For every query-block step the consumers stage their fp32 dQ
// partial (block_m rows x head_dim, as boxes of 8 columns) in shared memory; the step's writer's first
// lane adds it into the workspace accumulator, which stores each query block in the staging's order
// (BwdTileConfig::dq_staging_index), with one contiguous bulk reduce-add (no per-element atomics; issuing
// one per row kept the warp busy most of each step at D = 64), and hands the staging buffer back (to each
// warpgroup on its own barrier: pipeline.cuh) once the copy engine has read it. Keeping the issue (and,
// in deterministic mode, the wait for this query block's turn) off the consumers lets their tensor-core
// work run on meanwhile.
#pragma once

#include "kernels/sm90/bwd/pipeline.cuh"
#include "kernels/sm90/bwd/tile_work.cuh"
#include "kernels/sm90/ptx/bulk.cuh"
#include "kernels/sm90/ptx/sync.cuh"
#include "launch/bwd_params.hpp"

namespace flash4::sm90 {

template <int kHeadDim>
struct BwdDqWriter {
  static constexpr BwdTileConfig kCfg = bwd_tile_config(kHeadDim);
  using Handoff = DqHandoff;
  static constexpr int kWriters = Handoff::kWriters;

  char* smem;
  int writer;    // 0 .. kWriters - 1: takes the CTA's steps congruent to it
  int step = 0;  // the CTA's steps so far, over all its tiles

  // Before the first tile: the staging buffer starts free.
  __device__ __forceinline__ void start() const {
    if (writer == 0) hand_back();
  }

  // The staged partial is complete once every warpgroup has handed its slice over. The barrier ids are
  // constants, one branch per writer: computed from the step (or the writer index), the second id took a
  // 25th register of the writer's 24 (a spill).
  template <int kWriter>
  __device__ __forceinline__ static void wait_staged_by() {
#pragma unroll
    for (int w = 0; w < Handoff::kWarpgroups; ++w) named_barrier_sync(Handoff::full(kWriter, w), Handoff::kThreads);
  }
  __device__ __forceinline__ void wait_staged() const {
    static_assert(kWriters == 2, "one branch per writer");
    if (writer == 0) wait_staged_by<0>();
    else wait_staged_by<1>();
  }
  // The staging buffer may be overwritten again.
  __device__ __forceinline__ void hand_back() const {
#pragma unroll
    for (int w = 0; w < Handoff::kWarpgroups; ++w) named_barrier_arrive(Handoff::empty(w), Handoff::kThreads);
  }

  // Lane 0 only: the bulk groups it commits are its own to wait for.
  __device__ void add_step(const BwdKernelParams& p, const BwdTileWork& work, const DqTarget& target, int head,
                           int m_block) const {
    // The partial and the query block's accumulator hold the block in the same order (dq_staging_index):
    // one contiguous reduce-add (or, for the first write into a deterministic copy, store) per staged partial.
    float* block = dq_accum_rows<kHeadDim>(p, work, target.copy, head, m_block);
    const float* partial = reinterpret_cast<const float*>(smem + kCfg.dq_offset());
    if (target.stores()) bulk_store(block, partial, kCfg.dq_buffer_bytes());
    else bulk_reduce_add_f32(block, partial, kCfg.dq_buffer_bytes());
    bulk_commit_group();
    // The buffer goes back as soon as the copy engine has read it: in deterministic mode the wait for the
    // adds to land (below) then overlaps the consumers' next step instead of delaying it.
    bulk_wait_group_read_all();
  }

  // One tile: each step's partial reduce-added into the accumulator (its copy, in deterministic mode in
  // this query block's turn).
  __device__ void run(const BwdKernelParams& p, const BwdTileWork& work) {
    const bool leader = threadIdx.x % 32 == 0;
    for (int head = work.first_head_q; head < work.first_head_q + work.group_size; ++head) {
      for (int i = work.walk_begin; i < work.walk_end; ++i, ++step) {
        if (step % kWriters != writer) continue;
        const int m_block = bwd_walk_block(i);
        const DqTarget target = dq_target<kHeadDim>(p, work, head, m_block);
        if (target.semaphore != nullptr && leader) {  // waited for while the consumers still compute the step
          spin_until_acquire_gpu(target.semaphore, target.turn);
          fence_async_global();  // the reduce-adds below come after the predecessor's, seen through the flag
        }
        __syncwarp();  // bar.sync wants the whole warp
        wait_staged();
        if (leader) add_step(p, work, target, head, m_block);
        __syncwarp();
        hand_back();  // after every step, the last included: the consumers take it once more at their end
        if (target.semaphore != nullptr && leader) {
          bulk_wait_group_all();  // the adds themselves, not just their reads, before the successor's turn
          fence_async_global();
          __threadfence();
          store_release_gpu(target.semaphore, target.turn + 1);
        }
      }
    }
  }
};

}  // namespace flash4::sm90
