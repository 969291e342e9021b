// What the decode kernels read at run time (src/kernels/sm90/decode), filled by the host
// (src/host/dispatch/kvcache.cpp) from a validated flash4_kvcache_params.
#pragma once

#include <cstdint>

#include "kernels/common/fast_divmod.hpp"
#include "launch/tensor_strides.hpp"

namespace flash4 {

struct DecodeParams {
  const void* q;
  void* k_cache;
  void* v_cache;
  const void* k_new;  // null when seqlen_new is 0
  const void* v_new;
  void* o;
  float* lse;  // optional: (batch, heads_q, seqlen_q)
  // A paged cache's batch stride is its page stride.
  TensorStrides q_strides, k_cache_strides, v_cache_strides, k_new_strides, v_new_strides, o_strides;

  int batch;
  int seqlen_q;
  int seqlen_new;
  int heads_q;
  int heads_kv;
  // The call's true head dims: head_dim of q, k_cache and k_new, head_dim_v of v_cache, v_new and o (multiples
  // of 8, at most the kernel's width). Loads zero-fill the kernel's columns past them, and nothing is
  // written past them.
  int head_dim;
  int head_dim_v;
  int group;  // heads_q / heads_kv
  int rows;   // seqlen_q * group packed query rows per (sequence, KV head)
  int row_blocks;  // CTAs along the packed rows

  // The cache. Not paged: cache_batch sequences of `capacity` rows. Paged: block_table rows of
  // max_pages_per_seq pages of page.divisor rows, capacity = max_pages_per_seq * page size.
  int capacity;
  int cache_batch;
  const int* cache_seqlens;    // null: every sequence holds `capacity` keys
  const int* cache_batch_idx;  // null: sequence b is cache sequence b
  const int* block_table;      // null: not paged
  int64_t block_table_stride;
  int num_pages;
  FastDivmod page;

  float scale_log2;        // softmax scale * log2(e), or softcap * log2(e) with softcap
  float softcap_prescale;  // scale / softcap when softcap is on
  int has_softcap;
  int window_left;   // -1: unbounded
  int window_right;  // -1: unbounded; 0 for causal

  // Split-KV: with splits > 1 each CTA writes its normalized partial O (fp32) and natural-log LSE for its
  // rows to these arrays, indexed [split][batch][seqlen_q][heads_q] (times head_dim_v for O), and the
  // combine kernel writes o and lse.
  int splits;
  float* partial_o;
  float* partial_lse;
};

}  // namespace flash4
