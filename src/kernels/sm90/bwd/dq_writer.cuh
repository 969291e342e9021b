// The dQ writer: warp 1 of the producer warpgroup. For every query-block step the consumers stage their
// fp32 dQ partial (64 rows x head_dim) in shared memory; this warp reduce-adds it into the workspace
// accumulator with bulk reduce-adds (cp.reduce.async.bulk, no per-element atomics) and hands the staging
// buffer back once the copy engine has read it. Keeping the issue (and, in deterministic mode, the wait
// for this query block's turn) off the consumers lets their tensor-core work run on meanwhile.
#pragma once

#include "kernels/common/bwd_params.hpp"
#include "kernels/common/mask.hpp"
#include "kernels/sm90/bwd/pipeline.cuh"
#include "kernels/sm90/bwd/tile_work.cuh"
#include "kernels/sm90/ptx/bulk.cuh"
#include "kernels/sm90/ptx/sync.cuh"

namespace flash4::sm90 {

template <int kHeadDim>
struct BwdDqWriter {
  static constexpr BwdTileConfig kCfg = bwd_tile_config(kHeadDim);
  static constexpr int kBlockM = kCfg.block_m;

  __device__ static void run(const BwdKernelParams& p, const BwdTileWork& work, const char* smem) {
    const int steps = work.num_steps();
    if (steps == 0) return;
    const int lane = threadIdx.x % 32;
    const float* staging = reinterpret_cast<const float*>(smem + kCfg.dq_offset());
    named_barrier_arrive(int(BwdBarrierId::kDqEmpty), kBwdDqHandoffThreads);  // the buffer starts free

    int step = 0;
    for (int head = work.first_head_q; head < work.first_head_q + work.group_size; ++head) {
      for (int m_block = work.queries.begin; m_block < work.queries.end; ++m_block, ++step) {
        float* accum = dq_accum_rows<kHeadDim>(p, work, head, m_block);
        const DqTurn turn = dq_turn<kHeadDim>(p, work, head, m_block);
        if (turn.semaphore != nullptr) {
          if (lane == 0) spin_until_acquire_gpu(turn.semaphore, turn.turn);
          __syncwarp();
          fence_async_global();  // the reduce-adds below come after the predecessor's, seen through the flag
        }
        named_barrier_sync(int(BwdBarrierId::kDqFull), kBwdDqHandoffThreads);
        for (int row = lane; row < kBlockM; row += 32) {
          bulk_reduce_add_f32(accum + row * kHeadDim, staging + row * kCfg.dq_row_floats(), kHeadDim * sizeof(float));
        }
        bulk_commit_group();
        // The buffer goes back as soon as the copy engine has read it: in deterministic mode the wait for
        // the adds to land (below) then overlaps the consumers' next step instead of delaying it.
        bulk_wait_group_read_all();
        __syncwarp();
        // The consumers sync on kDqEmpty once per step, before staging: no hand-back after the last one.
        if (step + 1 < steps) named_barrier_arrive(int(BwdBarrierId::kDqEmpty), kBwdDqHandoffThreads);
        if (turn.semaphore != nullptr) {
          bulk_wait_group_all();  // the adds themselves, not just their reads, before the successor's turn
          fence_async_global();
          __syncwarp();
          if (lane == 0) {
            __threadfence();
            store_release_gpu(turn.semaphore, turn.turn + 1);
          }
        }
      }
    }
  }
};

}  // namespace flash4::sm90
