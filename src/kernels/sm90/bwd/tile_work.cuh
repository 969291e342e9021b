// Resolves a backward CTA index into its work: one key block of one (sequence, kv head), the query
// heads of that kv head's group, and the query blocks that see any of the keys. Resolved once per CTA
// and shared with the roles through shared memory (kernel.cuh).
//
// Order: the key block is the slow coordinate (linear = n_block * batch * heads_kv + sequence/head), so
// every (sequence, head)'s key block 0 starts first. Under bottom-right causal masking key block 0 sees
// the most query rows, so this is longest-first; and in deterministic mode every CTA's predecessors in
// the dQ reduce-add order (the lower key blocks of the same head) have lower indices. That they were
// also launched before it is an assumption: CUDA starts CTAs in index order in practice but does not
// promise it (FA3's deterministic backward makes the same one).
#pragma once

#include "kernels/common/bwd_params.hpp"
#include "kernels/common/mask.hpp"
#include "kernels/common/sequence_rows.hpp"

namespace flash4::sm90 {

struct BwdTileWork {
  int batch;
  int head_kv;
  int first_head_q;  // the group's query heads are [first_head_q, first_head_q + group_size)
  int group_size;
  int n_block;
  int n0;            // first key of the block within its sequence
  int q_row_base;    // TMA seq coordinate of the sequence's row 0 (nonzero in varlen mode)
  int k_row_base;
  int tma_batch;     // 0 in varlen mode
  int seqlen_q;
  int seqlen_k;
  long long workspace_row0;  // the sequence's first row in the per-head workspace arrays
  QueryBlockRange queries;

  __device__ __forceinline__ bool has_keys() const { return n0 < seqlen_k; }
  // Query-block steps of the whole CTA: every query block of every head of the group.
  __device__ __forceinline__ int num_steps() const { return queries.count() * group_size; }
};

template <int kHeadDim>
__device__ __forceinline__ BwdTileWork resolve_bwd_tile(const BwdKernelParams& p, int linear) {
  constexpr int kBlockM = bwd_tile_config(kHeadDim).block_m;
  constexpr int kBlockN = bwd_tile_config(kHeadDim).block_n;
  const int sequences_heads = p.batch * p.heads_kv;
  BwdTileWork work;
  work.n_block = linear / sequences_heads;
  const int bh = linear - work.n_block * sequences_heads;
  work.batch = bh / p.heads_kv;
  work.head_kv = bh - work.batch * p.heads_kv;
  work.group_size = p.heads_q / p.heads_kv;
  work.first_head_q = work.head_kv * work.group_size;
  work.n0 = work.n_block * kBlockN;
  const SequenceRows rows = sequence_rows(work.batch, p.seqlen_q, p.seqlen_k, p.cu_seqlens_q, p.cu_seqlens_k);
  work.q_row_base = rows.q_row_base;
  work.k_row_base = rows.k_row_base;
  work.seqlen_q = rows.seqlen_q;
  work.seqlen_k = rows.seqlen_k;
  work.tma_batch = rows.tma_batch;
  work.workspace_row0 = p.workspace_rows().first_row(work.batch, p.cu_seqlens_q);
  const MaskSpec mask{work.seqlen_q, work.seqlen_k, p.window_left, p.window_right};
  work.queries = work.has_keys() ? query_block_range(mask, work.n0, kBlockN, kBlockM) : QueryBlockRange{0, 0, 0, 0};
  return work;
}

// Deterministic mode: the semaphore that counts the key blocks whose dQ adds into (head, m_block) are
// done, and this CTA's turn among them (the lowest key block adds first). A null semaphore outside
// deterministic mode.
struct DqTurn {
  int* semaphore;
  int turn;
};
template <int kHeadDim>
__device__ __forceinline__ DqTurn dq_turn(const BwdKernelParams& p, const BwdTileWork& work, int head, int m_block) {
  constexpr BwdTileConfig kCfg = bwd_tile_config(kHeadDim);
  if (!p.deterministic) return DqTurn{nullptr, 0};
  const MaskSpec mask{work.seqlen_q, work.seqlen_k, p.window_left, p.window_right};
  return DqTurn{p.dq_semaphores + (int64_t(head) * p.batch + work.batch) * p.m_blocks_max + m_block,
                work.n_block - key_block_range(mask, m_block * kCfg.block_m, kCfg.block_m, kCfg.block_n).begin};
}

// The first of query block `m_block`'s rows in the fp32 dQ accumulator of query head `head`.
template <int kHeadDim>
__device__ __forceinline__ float* dq_accum_rows(const BwdKernelParams& p, const BwdTileWork& work, int head, int m_block) {
  return p.dq_accum +
         (head * p.rows_per_head + work.workspace_row0 + m_block * bwd_tile_config(kHeadDim).block_m) * kHeadDim;
}

}  // namespace flash4::sm90
