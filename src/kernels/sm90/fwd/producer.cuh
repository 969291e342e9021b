// The producer role: one thread of the producer warpgroup walks the same tiles as the consumers and
// streams Q once per tile and K/V block by block (last key block first, the order the consumers use)
// through the shared-memory ring with TMA.
#pragma once

#include "kernels/common/fwd_params.hpp"
#include "kernels/sm90/fwd/pipeline.cuh"
#include "kernels/sm90/fwd/tile_work.cuh"
#include "kernels/sm90/ptx/mbarrier.cuh"
#include "kernels/sm90/ptx/tma.cuh"

namespace flash4::sm90 {

template <int kHeadDim>
struct FwdProducer {
  using Layout = FwdSmemLayout<kHeadDim>;
  static constexpr FwdTileConfig kCfg = Layout::kCfg;

  // Loads one tile-shaped operand box by box; boxes are swizzle-width column slices stacked in smem.
  __device__ __forceinline__ static void load_tile(char* dst, const CUtensorMap* map, uint64_t* barrier, int rows, int row,
                                                   int head, int batch) {
#pragma unroll
    for (int box = 0; box < kCfg.col_blocks(); ++box) {
      tma_load_4d(dst + box * rows * kCfg.swizzle_bytes, map, barrier, box * kCfg.box_cols(), row, head, batch);
    }
  }

  __device__ static void run(const FwdKernelParams& p, char* smem, FwdBarriers<kCfg.stages>* bars) {
    RingPosition<kCfg.stages> ring;
    uint32_t q_empty_parity = 1;  // the first wait passes: the ring starts empty
    const int num_tiles = p.order.num_tiles();
    for (int linear = blockIdx.x; linear < num_tiles; linear += gridDim.x) {
      const TileWork work = resolve_tile(p, linear, kCfg.block_m, kCfg.block_n);
      if (work.keys.count() == 0) continue;  // consumers write zeros and -inf without loading anything

      mbarrier_wait(&bars->q_empty, q_empty_parity);
      q_empty_parity ^= 1;
      mbarrier_arrive_expect_bytes(&bars->q_full, kCfg.q_bytes());
      load_tile(smem + Layout::kQOffset, &p.tma_q, &bars->q_full, kCfg.block_m, work.q_row_base + work.m0, work.head,
                work.tma_batch);

      for (int block = work.keys.end - 1; block >= work.keys.begin; --block) {
        const int key_row = work.k_row_base + block * kCfg.block_n;
        const int stage_offset = ring.stage * kCfg.kv_stage_bytes();
        mbarrier_wait(&bars->k_empty[ring.stage], ring.phase ^ 1);
        mbarrier_arrive_expect_bytes(&bars->k_full[ring.stage], kCfg.kv_stage_bytes());
        load_tile(smem + Layout::kKOffset + stage_offset, &p.tma_k, &bars->k_full[ring.stage], kCfg.block_n, key_row,
                  work.head_kv, work.tma_batch);
        mbarrier_wait(&bars->v_empty[ring.stage], ring.phase ^ 1);
        mbarrier_arrive_expect_bytes(&bars->v_full[ring.stage], kCfg.kv_stage_bytes());
        load_tile(smem + Layout::kVOffset + stage_offset, &p.tma_v, &bars->v_full[ring.stage], kCfg.block_n, key_row,
                  work.head_kv, work.tma_batch);
        ring.advance();
      }
    }
  }
};

}  // namespace flash4::sm90
