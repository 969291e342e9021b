// Everything the forward kernel reads at run time, built by the host planner and passed by value as a
// __grid_constant__ kernel parameter (so the TMA descriptors live in parameter space, as TMA requires).
#pragma once

#include <cuda.h>

#include <cstdint>

#include "kernels/common/mask.hpp"
#include "kernels/common/tile_order.hpp"
#include "kernels/common/varlen_tiles.hpp"
#include "launch/tensor_strides.hpp"

namespace flash4 {

struct FwdKernelParams {
  // 4-D maps over (head_dim, seq, head, batch); in varlen mode seq spans all sequences and batch is 1.
  CUtensorMap tma_q;
  CUtensorMap tma_k;
  CUtensorMap tma_v;
  // O with 64-row boxes (one consumer warpgroup's rows); encoded only when store_o_with_tma is set.
  CUtensorMap tma_o;
  // The epilogue stores O with TMA: fixed length (a varlen tile's overhang would write the next
  // sequence's rows, which lie inside the map) and a tile config that stages O in shared memory.
  int store_o_with_tma;

  void* o;
  TensorStrides o_strides;
  int o_cols;  // head_dim_v: the columns of O written (the kernel's head dim may be wider)
  float* lse;  // optional: (batch, heads_q, seqlen_q) or (heads_q, total_q) in varlen mode

  int batch;
  int seqlen_q;  // fixed-length sizes; per-sequence sizes come from cu_seqlens in varlen mode
  int seqlen_k;
  int heads_q;
  int heads_kv;
  int total_q;  // varlen: rows of q/o (the LSE row stride)
  const int* cu_seqlens_q;  // null: fixed length
  const int* cu_seqlens_k;
  const int* seqused_q;     // null: every row of a sequence's span is used (sequence_rows.hpp)
  const int* seqused_k;
  const float* sink;        // null: no learnable sinks; else heads_q logits (natural log, unscaled)

  float scale_log2;        // softmax scale * log2(e), or softcap * log2(e) with softcap
  float softcap_prescale;  // scale / softcap when softcap is on
  int has_softcap;
  int window_left;         // -1: unbounded
  int window_right;        // -1: unbounded; 0 for causal

  TileOrder order;  // persistent tile walk (m-blocks sized by the tile table)
  int num_tiles;    // order.num_tiles(), read by every claim: a parameter reloads where a product would spill
  // Varlen: the compact tile space the prepare kernel lists in the workspace (varlen_tiles.hpp): claimed
  // index i is a tile of unit i / heads_q, and *varlen_num_tiles replaces num_tiles. Null: `order`.
  const VarlenUnit* varlen_units;
  const int* varlen_num_tiles;
  // Dynamic scheduling: a CTA's first tile is blockIdx.x and every later one is gridDim.x plus a claim
  // from this counter, which the host (varlen: the prepare kernel) zeroes before the launch. Null: each CTA
  // strides through the order by gridDim.x (tiles of equal cost, where a static walk is as balanced and
  // needs no counter).
  int* tile_counter;

  // Paged K/V (null block_table: not paged). tma_k / tma_v then map the cache as (head_dim, page_size,
  // heads_kv, num_pages) with boxes of page_box_rows rows (paged_kv.hpp), and key t of sequence b is row
  // t % page_size of page block_table[b * block_table_stride + t / page_size].
  const int* block_table;
  int64_t block_table_stride;
  int page_size;
  int num_pages;
  int pages_per_sequence;  // the entries of a table row the validator covered: no read goes past them
  int page_box_rows;
};

}  // namespace flash4
