// Everything the three backward kernels (preprocess, main, postprocess) read at run time, built by the
// host and passed by value as a __grid_constant__ parameter (the TMA descriptors must live there).
#pragma once

#include <cuda.h>

#include <cstdint>

#include "launch/bwd_tile_config.hpp"
#include "launch/tensor_strides.hpp"

namespace flash4 {

struct BwdKernelParams {
  // 4-D maps over (head_dim, seq, head, batch) as in the forward; Q and dO boxes are block_m rows, K and V
  // boxes block_n rows.
  CUtensorMap tma_q;
  CUtensorMap tma_do;
  CUtensorMap tma_k;
  CUtensorMap tma_v;

  // Inputs the pre/postprocess read element by element.
  const void* o;
  const void* dout;
  const float* lse;  // natural log, (batch, heads_q, seqlen_q) or (heads_q, total_q)
  TensorStrides o_strides;
  TensorStrides dout_strides;

  void* dq;
  void* dk;
  void* dv;
  TensorStrides dq_strides;
  TensorStrides dk_strides;
  TensorStrides dv_strides;

  // Workspace (see BwdWorkspaceRows): per query head, rows_per_head rows.
  // [dq_copies][heads_q][rows_per_head][head_dim], each query block's block_m x head_dim floats in the
  // staging order (BwdTileConfig::dq_staging_index); outside deterministic mode the preprocess zeroes the rows
  // the main kernel adds into (in it, each copy's first write stores: bwd_dq_copy_written)
  float* dq_accum;
  float* lse_log2;     // [heads_q][rows_per_head]: LSE * log2(e); +inf on padding and fully masked rows
  float* dsum;         // [heads_q][rows_per_head]: rowsum(dO * O); 0 on padding rows
  int* dq_semaphores;  // deterministic mode: [dq_copies][heads_q][batch][m_blocks_max], zeroed by the host
  int* tile_counter;   // tiles claimed so far (kernels/sm90/bwd/kernel.cuh); the preprocess zeroes it
  long long rows_per_head;
  int dq_copies;       // copies of the dQ accumulator the postprocess sums (bwd_dq_copies): 1 unless deterministic

  int batch;
  int seqlen_q;
  int seqlen_k;
  int heads_q;
  int heads_kv;
  int head_dim;  // the kernel's (its tiles and the dQ accumulator's rows)
  int cols;      // head_dim of q, k, dq, dk: the columns written to dq and dk (<= head_dim)
  int cols_v;    // head_dim_v of v, o, dout, dv: the columns read from o and dout, written to dv (<= head_dim)
  int total_q;
  int max_seqlen_q;  // fixed length: seqlen_q (sizes the pre/postprocess grids)
  int m_blocks_max;  // ceil(max_seqlen_q / block_m): semaphores per (head, sequence)
  int n_blocks_max;  // ceil(max_seqlen_k / block_n): tiles per (sequence, kv head), tile_work.cuh's order
  int num_tiles;     // n_blocks_max * batch * heads_kv, claimed in order by the persistent grid's CTAs
  const int* cu_seqlens_q;
  const int* cu_seqlens_k;
  const int* seqused_q;  // null: every row of a sequence's span is used (sequence_rows.hpp)
  const int* seqused_k;
  const float* sink;     // null: no learnable sinks; else heads_q logits, and dsink their gradient
  float* dsink;

  float scale_log2;        // softmax scale * log2(e), or softcap * log2(e) with softcap
  float softcap_prescale;  // scale / softcap when softcap is on
  int has_softcap;
  float softmax_scale;     // applied to dK (epilogue) and dQ (postprocess)
  int window_left;
  int window_right;
  int deterministic;

  FLASH4_HD BwdWorkspaceRows workspace_rows() const {
    return BwdWorkspaceRows{bwd_tile_config(head_dim).block_m, seqlen_q, cu_seqlens_q != nullptr};
  }
  // Floats from one copy of the dQ accumulator to the next (a kernel passes its compile-time head dim).
  FLASH4_HD int64_t dq_copy_stride(int dim) const { return int64_t(heads_q) * rows_per_head * dim; }
};

}  // namespace flash4
