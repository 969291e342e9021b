// The backward producer: one thread loads the CTA's K and V block once, then streams (Q, dO, LSE in
// log2 units, D) for every query block step through the stage ring: the 2-D tiles with TMA, the two
// 64-float row vectors with plain bulk copies from the workspace.
#pragma once

#include "kernels/common/bwd_params.hpp"
#include "kernels/sm90/bwd/pipeline.cuh"
#include "kernels/sm90/bwd/tile_work.cuh"
#include "kernels/sm90/ptx/bulk.cuh"
#include "kernels/sm90/ptx/mbarrier.cuh"
#include "kernels/sm90/ptx/tma.cuh"

namespace flash4::sm90 {

template <int kHeadDim>
struct BwdProducer {
  static constexpr BwdTileConfig kCfg = bwd_tile_config(kHeadDim);
  // For offsets with a run-time argument (a static constexpr object has no device-side storage).
  __device__ __forceinline__ static constexpr BwdTileConfig cfg() { return bwd_tile_config(kHeadDim); }

  // One tile, box by box (64-column boxes stacked in shared memory).
  __device__ __forceinline__ static void load_tile(char* dst, const CUtensorMap* map, uint64_t* barrier, int rows,
                                                   int row, int head, int batch) {
#pragma unroll
    for (int box = 0; box < kCfg.col_blocks(); ++box) {
      tma_load_4d(dst + box * rows * kCfg.swizzle_bytes, map, barrier, box * kCfg.box_cols(), row, head, batch);
    }
  }

  __device__ static void run(const BwdKernelParams& p, const BwdTileWork& work, char* smem,
                             BwdBarriers<kCfg.stages>* bars) {
    if (work.num_steps() == 0) return;  // the consumers write zero dK/dV without loading anything
    const int key_row = work.k_row_base + work.n0;
    mbarrier_arrive_expect_bytes(&bars->kv_full, 2 * kCfg.kv_bytes());
    load_tile(smem + kCfg.k_offset(), &p.tma_k, &bars->kv_full, kCfg.block_n, key_row, work.head_kv, work.tma_batch);
    load_tile(smem + kCfg.v_offset(), &p.tma_v, &bars->kv_full, kCfg.block_n, key_row, work.head_kv, work.tma_batch);

    RingPosition<kCfg.stages> ring;
    for (int head = work.first_head_q; head < work.first_head_q + work.group_size; ++head) {
      const long long stats_row0 = head * p.rows_per_head + work.workspace_row0;
      for (int m_block = work.queries.begin; m_block < work.queries.end; ++m_block) {
        const int m0 = m_block * kCfg.block_m;
        mbarrier_wait(&bars->stage_empty[ring.stage], ring.phase ^ 1);
        uint64_t* full = &bars->stage_full[ring.stage];
        mbarrier_arrive_expect_bytes(full, kCfg.stage_bytes());
        load_tile(smem + cfg().q_offset(ring.stage), &p.tma_q, full, kCfg.block_m, work.q_row_base + m0, head,
                  work.tma_batch);
        load_tile(smem + cfg().do_offset(ring.stage), &p.tma_do, full, kCfg.block_m, work.q_row_base + m0, head,
                  work.tma_batch);
        bulk_load(smem + cfg().lse_offset(ring.stage), p.lse_log2 + stats_row0 + m0, kCfg.row_stat_bytes(), full);
        bulk_load(smem + cfg().dsum_offset(ring.stage), p.dsum + stats_row0 + m0, kCfg.row_stat_bytes(), full);
        ring.advance();
      }
    }
  }
};

}  // namespace flash4::sm90
