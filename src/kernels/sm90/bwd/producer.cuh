// The backward producer: for each of the CTA's tiles one thread loads the tile's K and V block once (as
// soon as the consumers are done with the previous tile's), then streams (Q, dO, LSE in log2 units, D)
// for every query block step through the stage ring, which runs on from tile to tile, so the next tile's
// first stages load while the consumers still write the previous tile's dK / dV: the 2-D tiles with TMA,
// the two 64-float row vectors with plain bulk copies from the workspace.
#pragma once

#include "kernels/common/bwd_tile_handout.hpp"
#include "kernels/sm90/bwd/pipeline.cuh"
#include "kernels/sm90/bwd/tile_work.cuh"
#include "kernels/sm90/ptx/bulk.cuh"
#include "kernels/sm90/ptx/mbarrier.cuh"
#include "kernels/sm90/ptx/tma.cuh"
#include "launch/bwd_params.hpp"

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

  // A row vector (LSE or D) of the stage.
  __device__ __forceinline__ static void load_row_stats(char* dst, const float* src, uint64_t* barrier) {
    bulk_load(dst, src, kCfg.row_stat_bytes(), barrier);
  }

  char* smem;
  BwdBarriers<kCfg.stages>* bars;
  RingPosition<kCfg.stages> ring{};
  bool loaded_kv = false;  // before: the consumers release the previous tile's K / V on kv_empty

  __device__ void run(const BwdKernelParams& p, const BwdTileWork& work) {
    if (work.num_steps() == 0) return;  // the consumers write zero dK/dV without loading anything
    const int key_row = work.k_row_base + work.n0;
    if (loaded_kv) mbarrier_wait(&bars->kv_empty, BwdTileHandout::kv_empty_parity(work.kv_phase));
    loaded_kv = true;
    mbarrier_arrive_expect_bytes(&bars->kv_full, 2 * kCfg.kv_bytes());
    load_tile(smem + kCfg.k_offset(), &p.tma_k, &bars->kv_full, kCfg.block_n, key_row, work.head_kv, work.tma_batch);
    load_tile(smem + kCfg.v_offset(), &p.tma_v, &bars->kv_full, kCfg.block_n, key_row, work.head_kv, work.tma_batch);

    for (int head = work.first_head_q; head < work.first_head_q + work.group_size; ++head) {
      const long long stats_row0 = head * p.rows_per_head + work.workspace_row0;
      for (int i = work.walk_begin; i < work.walk_end; ++i) {
        const int m_block = bwd_walk_block(i);
        const int m0 = m_block * kCfg.block_m;
        mbarrier_wait(&bars->stage_empty[ring.stage], ring.phase ^ 1);
        uint64_t* full = &bars->stage_full[ring.stage];
        mbarrier_arrive_expect_bytes(full, kCfg.stage_bytes());
        const int row = work.q_row_base + m0;
        load_tile(smem + cfg().q_offset(ring.stage), &p.tma_q, full, kCfg.block_m, row, head, work.tma_batch);
        load_row_stats(smem + cfg().lse_offset(ring.stage), p.lse_log2 + stats_row0 + m0, full);
        load_tile(smem + cfg().do_offset(ring.stage), &p.tma_do, full, kCfg.block_m, row, head, work.tma_batch);
        load_row_stats(smem + cfg().dsum_offset(ring.stage), p.dsum + stats_row0 + m0, full);
        ring.advance();
      }
    }
  }
};

}  // namespace flash4::sm90
