// Resolves a linear persistent-tile index into the work of one CTA tile: which sequence and head, which
// query rows, which key blocks. The producer resolves each tile it claims and hands it to the consumers
// (pipeline.cuh).
#pragma once

#include "kernels/common/mask.hpp"
#include "kernels/common/sequence_rows.hpp"
#include "kernels/common/tile_order.hpp"
#include "kernels/common/varlen_tiles.hpp"
#include "launch/fwd_params.hpp"

namespace flash4::sm90 {

struct TileWork {
  int batch;
  int head;
  int head_kv;
  int m0;          // first query row of the tile within its sequence
  int q_row_base;  // TMA seq coordinate of the sequence's row 0 (nonzero in varlen mode)
  int k_row_base;
  int tma_batch;   // TMA batch coordinate (0 in varlen mode)
  int seqlen_q;
  int seqlen_k;
  KeyBlockRange keys;
  bool has_rows;   // false when the tile lies past the end of its sequence (seqused_q of a fixed-length batch)
};

// Fills `work` (the producer's tile slot in shared memory: the producer has no registers to hold a tile).
__device__ __forceinline__ void resolve_tile(const FwdKernelParams& p, int linear, int block_m, int block_n,
                                             TileWork& work) {
  const Tile tile = p.varlen_units != nullptr ? varlen_tile_at(p.varlen_units, p.heads_q, p.order.longest_first, linear)
                                              : tile_at(p.order, linear);
  work.batch = tile.batch;
  work.head = tile.head;
  work.head_kv = tile.head / (p.heads_q / p.heads_kv);
  work.m0 = tile.m_block * block_m;
  const SequenceRows rows = sequence_rows(tile.batch, p.seqlen_q, p.seqlen_k, p.cu_seqlens_q, p.cu_seqlens_k,
                                          p.seqused_q, p.seqused_k);
  work.q_row_base = rows.q_row_base;
  work.k_row_base = rows.k_row_base;
  work.seqlen_q = rows.seqlen_q;
  work.seqlen_k = rows.seqlen_k;
  work.tma_batch = rows.tma_batch;
  work.has_rows = work.m0 < rows.seqlen_q;
  const MaskSpec mask{rows.seqlen_q, rows.seqlen_k, p.window_left, p.window_right};
  work.keys = work.has_rows ? key_block_range(mask, work.m0, block_m, block_n) : KeyBlockRange{0, 0, 0, 0};
}

}  // namespace flash4::sm90
