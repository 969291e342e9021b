// Resolves a backward tile index into its work: one key block of one (sequence, kv head), the query
// heads of that kv head's group, and the query blocks that see any of the keys. The CTA's scheduler
// thread resolves each tile in place, into a shared-memory slot the other roles read (kernel.cuh).
//
// Order: the key block is the fast coordinate (linear = (sequence * heads_kv + kv head) * n_blocks_max +
// index in the head), so the tiles running at once share one or a few (sequence, head)s and their Q / dO
// tiles and dQ accumulator rows stay in L2. (Key block slow spread the running CTAs over every head: their
// working set outgrew L2, and the consumers waited on the dQ reduce-adds.) Which key block an index in the
// head names, and the order in which every role walks a tile's query blocks, depend on the mode
// (bwd_key_block_of, bwd_walk_begin in bwd_tile_config.hpp, where the deterministic turns are too).
#pragma once

#include "kernels/common/mask.hpp"
#include "kernels/common/sequence_rows.hpp"
#include "launch/bwd_params.hpp"

namespace flash4::sm90 {

struct BwdTileWork {
  int kv_phase;      // parity of the K / V barriers' phase for this tile (set by the scheduler, kernel.cuh)
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
  // The query blocks the CTA steps through: those that see any of its keys; the mask covers every block
  // outside the unmasked ones.
  QueryBlockRange queries;
  // Every role walks each query head's blocks in this order: block bwd_walk_block(i) for i in [walk_begin,
  // walk_end) (bwd_walk_begin). Resolved here, so that a role's loop compares with a field in shared memory
  // as a plain one does: computing the bounds in the loop took a register the D = 64 consumer lacks.
  int walk_begin;
  int walk_end;

  // False: no key of the CTA lies inside the sequence, so there is nothing to write.
  __device__ __forceinline__ bool has_keys() const { return n0 < seqlen_k; }
  // Query-block steps of the tile: every query block of every head of the group.
  __device__ __forceinline__ int num_steps() const { return queries.count() * group_size; }
};

template <int kHeadDim>
__device__ __forceinline__ void resolve_bwd_tile(const BwdKernelParams& p, int linear, BwdTileWork& work) {
  constexpr int kBlockM = bwd_tile_config(kHeadDim).block_m;
  constexpr int kBlockN = bwd_tile_config(kHeadDim).block_n;
  const int bh = linear / p.n_blocks_max;
  const bool deterministic = p.deterministic != 0;
  work.n_block = bwd_key_block_of(linear - bh * p.n_blocks_max, p.n_blocks_max, deterministic);
  work.batch = bh / p.heads_kv;
  work.head_kv = bh - work.batch * p.heads_kv;
  work.group_size = p.heads_q / p.heads_kv;
  work.first_head_q = work.head_kv * work.group_size;
  work.n0 = work.n_block * kBlockN;
  const SequenceRows rows = sequence_rows(work.batch, p.seqlen_q, p.seqlen_k, p.cu_seqlens_q, p.cu_seqlens_k,
                                          p.seqused_q, p.seqused_k);
  work.q_row_base = rows.q_row_base;
  work.k_row_base = rows.k_row_base;
  work.seqlen_q = rows.seqlen_q;
  work.seqlen_k = rows.seqlen_k;
  work.tma_batch = rows.tma_batch;
  work.workspace_row0 = p.workspace_rows().first_row(work.batch, p.cu_seqlens_q);
  const MaskSpec mask{work.seqlen_q, work.seqlen_k, p.window_left, p.window_right};
  work.queries = query_block_range(mask, work.n0, kBlockN, kBlockM);
  work.walk_begin = bwd_walk_begin(work.queries, deterministic);
  work.walk_end = bwd_walk_end(work.queries, deterministic);
}

// Where a CTA's dQ partial of (query head `head`, query block `m_block`) goes: its copy of the
// accumulator (bwd_dq_order; 0 unless deterministic) and, in deterministic mode, the semaphore that counts
// the key blocks of that copy whose adds into the block are done, and this CTA's turn among them. A null
// semaphore outside deterministic mode.
struct DqTarget {
  int copy;
  int* semaphore;
  int turn;
  // The first write into this copy of the block (deterministic mode, turn 0): it stores, the later turns add
  // (bwd_dq_copy_written).
  __device__ __forceinline__ bool stores() const { return semaphore != nullptr && turn == 0; }
};
template <int kHeadDim>
__device__ __forceinline__ DqTarget dq_target(const BwdKernelParams& p, const BwdTileWork& work, int head, int m_block) {
  constexpr BwdTileConfig kCfg = bwd_tile_config(kHeadDim);
  if (!p.deterministic) return DqTarget{0, nullptr, 0};
  const MaskSpec mask{work.seqlen_q, work.seqlen_k, p.window_left, p.window_right};
  const int contributors_end = key_block_range(mask, m_block * kCfg.block_m, kCfg.block_m, kCfg.block_n).end;
  const BwdDqOrder order = bwd_dq_order(work.n_block, contributors_end, p.dq_copies);
  const int64_t head_row = int64_t(order.copy) * p.heads_q + head;
  return DqTarget{order.copy, p.dq_semaphores + (head_row * p.batch + work.batch) * p.m_blocks_max + m_block, order.turn};
}

// Query block `m_block`'s block_m x head_dim floats in copy `copy` of query head `head`'s fp32 dQ
// accumulator, in the order of BwdTileConfig::dq_staging_index.
template <int kHeadDim>
__device__ __forceinline__ float* dq_accum_rows(const BwdKernelParams& p, const BwdTileWork& work, int copy, int head,
                                                int m_block) {
  const long long head_row = (long long)copy * p.heads_q + head;
  return p.dq_accum +
         (head_row * p.rows_per_head + work.workspace_row0 + m_block * bwd_tile_config(kHeadDim).block_m) * kHeadDim;
}

}  // namespace flash4::sm90
