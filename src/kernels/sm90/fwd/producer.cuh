// The producer role: one thread of the producer warpgroup claims the CTA's tiles, resolves each and hands
// it to the consumers through the tile slots (pipeline.cuh), and streams its operands through the shared-memory
// ring with TMA: K of the tile's first key block, then Q once the consumers are done with the previous
// tile's Q, then the key blocks last to first with each block's V one block behind its K, the order in
// which the consumers use them (S of block j + 1 is issued with the PV product of block j). With a paged
// cache each K / V block is assembled from boxes of the pages the block table names.
#pragma once

#include "kernels/sm90/fwd/pipeline.cuh"
#include "kernels/sm90/fwd/tile_work.cuh"
#include "kernels/sm90/ptx/mbarrier.cuh"
#include "kernels/sm90/ptx/tma.cuh"
#include "launch/fwd_params.hpp"

namespace flash4::sm90 {

template <int kHeadDim>
struct FwdProducer {
  using Layout = FwdSmemLayout<kHeadDim>;
  static constexpr FwdTileConfig kCfg = Layout::kCfg;

  const FwdKernelParams& p;
  char* smem;
  FwdBarriers<kCfg.stages>* bars;
  RingPosition<kCfg.stages> ring;  // the stage of the next V load; its block's K went into the same stage
  uint32_t q_empty_parity = 1;  // the first wait passes: the buffer starts empty

  // Loads one tile-shaped operand box by box; boxes are swizzle-width column slices stacked in smem.
  __device__ __forceinline__ static void load_boxes(char* dst, const CUtensorMap* map, uint64_t* barrier, int rows,
                                                    int row, int head, int batch) {
#pragma unroll
    for (int box = 0; box < kCfg.col_blocks(); ++box) {
      tma_load_4d(dst + box * rows * kCfg.swizzle_bytes, map, barrier, box * kCfg.box_cols(), row, head, batch);
    }
  }

  // Key block `block` of a paged cache: boxes of page_box_rows rows, each from the page that holds it (a box
  // never straddles a page). A box past the sequence's end, or on a page the table gives outside
  // [0, num_pages), is addressed at page num_pages: outside the map, so TMA fills it with zeros, still
  // counting its bytes, and nothing outside the cache is read. Table entries past the sequence's pages are
  // never read, nor past pages_per_sequence whatever the device-side lengths say.
  __device__ __forceinline__ void load_paged_boxes(char* dst, const CUtensorMap* map, uint64_t* barrier,
                                                   const TileWork& work, int block) const {
    const int* table = p.block_table + work.batch * p.block_table_stride;
    const int box_rows = p.page_box_rows;
    int key = block * kCfg.block_n;
    for (int row = 0; row < kCfg.block_n; row += box_rows, key += box_rows) {
      const int slot = key / p.page_size;
      int page = p.num_pages;
      if (key < work.seqlen_k && slot < p.pages_per_sequence) {
        const int entry = table[slot];
        if (static_cast<unsigned>(entry) < static_cast<unsigned>(p.num_pages)) page = entry;
      }
#pragma unroll
      for (int box = 0; box < kCfg.col_blocks(); ++box) {
        tma_load_4d(dst + (box * kCfg.block_n + row) * kCfg.swizzle_bytes, map, barrier, box * kCfg.box_cols(),
                    key - slot * p.page_size, work.head_kv, page);
      }
    }
  }

  // K or V of key block `block` into the stage at `at`, once the consumers have released that stage. The
  // stage receives kv_stage_bytes either way: whole-block boxes, or the paged boxes that tile the block.
  __device__ __forceinline__ void load_kv(const CUtensorMap* map, int offset, uint64_t* full, uint64_t* empty,
                                          RingPosition<kCfg.stages> at, const TileWork& work, int block) {
    mbarrier_wait(&empty[at.stage], at.phase ^ 1);
    mbarrier_arrive_expect_bytes(&full[at.stage], kCfg.kv_stage_bytes());
    char* dst = smem + offset + at.stage * kCfg.kv_stage_bytes();
    if (p.block_table != nullptr) {
      load_paged_boxes(dst, map, &full[at.stage], work, block);
    } else {
      load_boxes(dst, map, &full[at.stage], kCfg.block_n, work.k_row_base + block * kCfg.block_n, work.head_kv,
                 work.tma_batch);
    }
  }

  __device__ __forceinline__ void load_tile(const TileWork& work) {
    const int last = work.keys.end - 1;
    load_kv(&p.tma_k, Layout::kKOffset, bars->k_full, bars->k_empty, ring, work, last);
    mbarrier_wait(&bars->q_empty, q_empty_parity);
    q_empty_parity ^= 1;
    mbarrier_arrive_expect_bytes(&bars->q_full, kCfg.q_bytes());
    load_boxes(smem + Layout::kQOffset, &p.tma_q, &bars->q_full, kCfg.block_m(), work.q_row_base + work.m0, work.head,
               work.tma_batch);
    for (int block = last; block >= work.keys.begin; --block) {
      if (block > work.keys.begin) {
        RingPosition<kCfg.stages> next = ring;
        next.advance();
        load_kv(&p.tma_k, Layout::kKOffset, bars->k_full, bars->k_empty, next, work, block - 1);
      }
      load_kv(&p.tma_v, Layout::kVOffset, bars->v_full, bars->v_empty, ring, work, block);
      ring.advance();
    }
  }

  __device__ __forceinline__ int next_claim(int linear) const {
    return p.tile_counter != nullptr ? int(gridDim.x) + atomicAdd(p.tile_counter, 1) : linear + int(gridDim.x);
  }

  // The CTA's tiles, resolved into the tile slots: each is published as soon as it is claimed, and the
  // next one is claimed once this one's loads are issued, a few key blocks before the consumers finish it.
  // Tiles without query rows (fixed-length tiles past a sequence's seqused_q; varlen lists only tiles with
  // rows) are claimed past without being published; the last slot published holds one without rows.
  // The tile count: the varlen list's, written by the prepare kernel, or the grid's. Read at every claim:
  // held in one of the producer's 32 registers across the loop, it spilled.
  __device__ __forceinline__ int tile_count() const {
    return p.varlen_num_tiles != nullptr ? *p.varlen_num_tiles : p.num_tiles;
  }

  __device__ void run() {
    int linear = int(blockIdx.x);
    for (int number = 0;; linear = next_claim(linear)) {
      TileWork& work = free_slot(bars, number);
      work.has_rows = false;
      if (linear < tile_count()) {
        resolve_tile(p, linear, kCfg.block_m(), kCfg.block_n, work);
        if (!work.has_rows) continue;
      }
      publish_tile(bars, number++);
      if (!work.has_rows) return;
      if (work.keys.count() > 0) load_tile(work);  // else the consumers write zeros and -inf
    }
  }
};

}  // namespace flash4::sm90
