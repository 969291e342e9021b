// flash4 C++ API for attention against a KV cache (flash4_kvcache.h): the views of one decoding call, checked
// against each other, filled into flash4_kvcache_params, and launched with an RAII Workspace (flash4.hpp).
//
//   flash4::KvcacheTensors t;
//   t.q = flash4::TensorView::contiguous(q, flash4::DType::bf16, {B, 1, Hq, D});
//   t.k_cache = ...;  t.v_cache = ...;  t.o = ...;          // (cache_batch, capacity, Hkv, D)
//   t.k_new = ...;  t.v_new = ...;  t.cache_seqlens = lens;  // append one token per sequence
//   flash4::Status s = flash4::kvcache(t, {.causal = true}, stream, workspace);
// Included by flash4.hpp.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "flash4/flash4.hpp"
#include "flash4/flash4_kvcache.h"

namespace flash4 {

// A paged cache's block table: `data` (device, int32) holds batch rows of max_pages_per_seq page indices,
// row_stride elements apart. data == nullptr: the cache is not paged.
struct BlockTable {
  const std::int32_t* data = nullptr;
  std::int32_t max_pages_per_seq = 0;
  std::int64_t row_stride = 0;  // 0: max_pages_per_seq (rows packed)
};

// The tensors of one call. q: (batch, seqlen_q, heads_q, head_dim); o: the same with v's head dim. k_cache and
// v_cache: (cache_batch, cache_seqlen, heads_kv, head_dim), or (num_pages, page_size, heads_kv, head_dim) when
// block_table.data is set, v_cache's head dim its own (head_dim_v). k_new and v_new (optional, both or
// neither): (batch, seqlen_new, heads_kv, head_dim), v_new with v_cache's head dim, appended at cache_seqlens.
// The int32 arrays are device memory of `batch` entries.
struct KvcacheTensors {
  TensorView q;
  TensorView k_cache, v_cache;
  std::optional<TensorView> k_new, v_new;
  TensorView o;
  float* lse = nullptr;  // optional: fp32 (batch, heads_q, seqlen_q)
  const std::int32_t* cache_seqlens = nullptr;    // null: every sequence fills the cache
  const std::int32_t* cache_batch_idx = nullptr;  // not paged only; null: sequence b is cache row b
  BlockTable block_table;
};

// The C params for a call, after checking that the views agree with each other (an error names the tensor).
// num_splits: 0 lets the library choose, >= 1 asks for that many splits of the key range. options.deterministic
// is ignored (the call is deterministic). The workspace fields are left empty.
inline Result<flash4_kvcache_params> make_kvcache_params(const KvcacheTensors& t, const AttnOptions& options,
                                                         int num_splits = 0) {
  using detail::check_same;
  using detail::kHeadDimOnly;
  using detail::kRowDims;
  using detail::NamedView;
  constexpr unsigned kHeadsAndDim = 0b1100;
  constexpr unsigned kBatchAndDim = 0b1001;
  // The cache's first two dimensions are its own (cache sequences or pages, and their rows).
  for (NamedView v : {NamedView{"q", &t.q}, NamedView{"k_cache", &t.k_cache}, NamedView{"v_cache", &t.v_cache},
                      NamedView{"o", &t.o}}) {
    if (Status s = detail::check_view(v, t.q.dtype, false); !s.ok()) return s;
  }
  if (Status s = check_same({"o", &t.o}, {"q", &t.q}, kRowDims); !s.ok()) return s;
  if (Status s = check_same({"v_cache", &t.v_cache}, {"k_cache", &t.k_cache}, kRowDims); !s.ok()) return s;
  if (Status s = check_same({"o", &t.o}, {"v_cache", &t.v_cache}, kHeadDimOnly); !s.ok()) return s;
  if (Status s = check_same({"k_cache", &t.k_cache}, {"q", &t.q}, kHeadDimOnly); !s.ok()) return s;
  if (t.k_new.has_value() != t.v_new.has_value()) {
    return Status{FLASH4_ERROR_NULL_POINTER, "k_new and v_new: pass both (to append) or neither"};
  }
  if (t.k_new) {
    for (NamedView v : {NamedView{"k_new", &*t.k_new}, NamedView{"v_new", &*t.v_new}}) {
      if (Status s = detail::check_view(v, t.q.dtype, false); !s.ok()) return s;
    }
    if (Status s = check_same({"v_new", &*t.v_new}, {"k_new", &*t.k_new}, kRowDims); !s.ok()) return s;
    if (Status s = check_same({"k_new", &*t.k_new}, {"q", &t.q}, kBatchAndDim); !s.ok()) return s;
    if (Status s = check_same({"k_new", &*t.k_new}, {"k_cache", &t.k_cache}, kHeadsAndDim); !s.ok()) return s;
    if (Status s = check_same({"v_new", &*t.v_new}, {"v_cache", &t.v_cache}, kHeadsAndDim); !s.ok()) return s;
  }
  flash4_kvcache_params p{};
  p.struct_size = sizeof(p);
  p.dtype = static_cast<flash4_dtype>(t.q.dtype);
  p.q = t.q.data;
  p.k_cache = t.k_cache.data;
  p.v_cache = t.v_cache.data;
  p.o = t.o.data;
  p.lse = t.lse;
  p.q_strides = detail::strides_of(t.q);
  p.k_cache_strides = detail::strides_of(t.k_cache);
  p.v_cache_strides = detail::strides_of(t.v_cache);
  p.o_strides = detail::strides_of(t.o);
  if (t.k_new) {
    p.k_new = t.k_new->data;
    p.v_new = t.v_new->data;
    p.k_new_strides = detail::strides_of(*t.k_new);
    p.v_new_strides = detail::strides_of(*t.v_new);
    p.seqlen_new = static_cast<std::int32_t>(t.k_new->shape[1]);
  }
  p.batch = static_cast<std::int32_t>(t.q.shape[0]);
  p.seqlen_q = static_cast<std::int32_t>(t.q.shape[1]);
  p.heads_q = static_cast<std::int32_t>(t.q.shape[2]);
  p.heads_kv = static_cast<std::int32_t>(t.k_cache.shape[2]);
  p.head_dim = static_cast<std::int32_t>(t.q.shape[3]);
  p.head_dim_v = static_cast<std::int32_t>(t.v_cache.shape[3]);
  if (t.block_table.data != nullptr) {
    p.block_table = t.block_table.data;
    p.max_pages_per_seq = t.block_table.max_pages_per_seq;
    p.block_table_stride = t.block_table.row_stride != 0 ? t.block_table.row_stride : t.block_table.max_pages_per_seq;
    p.num_pages = static_cast<std::int32_t>(t.k_cache.shape[0]);
    p.page_size = static_cast<std::int32_t>(t.k_cache.shape[1]);
  } else {
    p.cache_batch = static_cast<std::int32_t>(t.k_cache.shape[0]);
    p.cache_seqlen = static_cast<std::int32_t>(t.k_cache.shape[1]);
  }
  p.cache_seqlens = t.cache_seqlens;
  p.cache_batch_idx = t.cache_batch_idx;
  p.softmax_scale = options.softmax_scale.value_or(1.0f / std::sqrt(static_cast<float>(t.q.shape[3])));
  p.causal = options.causal ? 1 : 0;
  p.window_left = options.window_left;
  p.window_right = options.window_right;
  p.softcap = options.softcap;
  p.num_splits = num_splits;
  return p;
}

// Enqueues the append and the attention on `stream` (asynchronous); o (and lse when set) are written, and the
// cache where rows are appended.
inline Status kvcache(const KvcacheTensors& tensors, const AttnOptions& options, flash4_stream_t stream,
                      Workspace& workspace, int num_splits = 0) {
  return detail::run(make_kvcache_params(tensors, options, num_splits), stream, workspace,
                     flash4_kvcache_workspace_size, flash4_kvcache);
}

}  // namespace flash4
