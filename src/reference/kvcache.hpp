// The CPU reference of flash4_kvcache (include/flash4/flash4_kvcache.h): append the new rows to a model of the
// cache (paged or not), gather each sequence's keys, and run the forward reference on them as a varlen problem.
// So the kvcache reference inherits forward_fp64's exactness and forward_naive's tolerance baseline.
//
// Dense float layouts, D = head_dim for q and the K tensors, Dv = dim_v() for o and the V tensors:
//   q             (batch, seqlen_q, heads_q, D);  o (batch, seqlen_q, heads_q, Dv);  lse (batch, heads_q, seqlen_q)
//   k_new, v_new  (batch, seqlen_new, heads_kv, D or Dv)
//   k/v cache     (cache_batch, cache_seqlen, heads_kv, D or Dv), or (num_pages, page_size, heads_kv, D or Dv)
// Only valid device-side values are modelled (cache_seqlens in range, block_table entries of the pages a
// sequence uses inside [0, num_pages)): anything else throws std::invalid_argument naming it.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "reference/reference.hpp"

namespace flash4::ref {

struct KvcacheProblem {
  int batch = 1;
  int seqlen_q = 1;
  int seqlen_new = 0;
  int heads_q = 1;
  int heads_kv = 1;
  int head_dim = 64;    // of q, k_cache, k_new
  int head_dim_v = 0;   // of v_cache, v_new, o; 0: head_dim
  double scale = 0.125;
  bool causal = false;
  int window_left = -1;
  int window_right = -1;
  double softcap = 0.0;
  // Not paged (page_size == 0): cache_batch sequences of cache_seqlen rows; cache_batch_idx (empty: b) picks
  // sequence b's. Paged (page_size > 0): num_pages pages; block_table holds batch rows of max_pages_per_seq.
  int cache_batch = 1;
  int cache_seqlen = 0;
  int page_size = 0;
  int num_pages = 0;
  int max_pages_per_seq = 0;
  std::vector<int> block_table = {};
  std::vector<int> cache_seqlens = {};   // empty: every sequence fills its capacity
  std::vector<int> cache_batch_idx = {};

  bool paged() const { return page_size > 0; }
  int capacity() const { return paged() ? max_pages_per_seq * page_size : cache_seqlen; }
  int cached(int b) const { return cache_seqlens.empty() ? capacity() : cache_seqlens[b]; }
  int keys(int b) const { return cached(b) + seqlen_new; }
  int dim_v() const { return head_dim_v != 0 ? head_dim_v : head_dim; }
  std::size_t q_elements() const;
  std::size_t o_elements() const;
  std::size_t k_new_elements() const;
  std::size_t v_new_elements() const;
  std::size_t k_cache_elements() const;
  std::size_t v_cache_elements() const;
  std::size_t lse_elements() const;
  // The row of key `key` (< capacity) of sequence b, kv head h, in the cache's (slots * rows * heads_kv) rows:
  // its first element is at row * head_dim in k_cache, row * dim_v() in v_cache.
  std::size_t cache_row(int b, int key, int h) const;
};

// Throws std::invalid_argument naming the field when the problem is inconsistent or a device-side value is
// out of range.
void validate(const KvcacheProblem& problem);

// The cache after the call: k/v_cache with rows t < seqlen_new of k_new / v_new written at keys cached(b) + t.
void append_new_rows(const KvcacheProblem& problem, std::span<float> k_cache, std::span<float> v_cache,
                     std::span<const float> k_new, std::span<const float> v_new);

// The forward problem the call computes on an appended cache: varlen, sequence b with seqlen_q queries and
// keys(b) keys gathered into packed k and v (rows, heads_kv, D or Dv).
struct GatheredKv {
  Problem problem;
  std::vector<float> k, v;
};
GatheredKv gather_keys(const KvcacheProblem& problem, std::span<const float> k_cache, std::span<const float> v_cache);

// O and LSE of the call (LSE reordered to (batch, heads_q, seqlen_q)), exact in fp64 and as the naive
// same-precision baseline; the inputs are not modified.
struct KvcacheInputs {
  std::span<const float> q, k_cache, v_cache, k_new, v_new;
};
ForwardResult64 kvcache_fp64(const KvcacheProblem& problem, const KvcacheInputs& inputs);
ForwardResult32 kvcache_naive(const KvcacheProblem& problem, Precision precision, const KvcacheInputs& inputs);

}  // namespace flash4::ref
