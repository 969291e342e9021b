// Validation rules for flash4_kvcache_params, in the order a reader fixes things: what kind of problem, its
// sizes, the cache's layout, the appended rows, the scores and mask, then the memory it points at.
#include "api/kvcache_validate.hpp"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "host/kvcache_plan.hpp"
#include "launch/decode_config.hpp"

namespace flash4::api {
namespace {

// Every released layout of flash4_kvcache_params: the first ends before head_dim_v.
constexpr std::size_t kStructSizes[] = {offsetof(flash4_kvcache_params, head_dim_v), sizeof(flash4_kvcache_params)};
constexpr std::int64_t kElementBytes = decode::kElementBytes;
constexpr std::int64_t kChunkBytes = decode::kChunkBytes;  // the kernels move 16-byte chunks
constexpr std::int64_t kInt32Max = std::numeric_limits<std::int32_t>::max();
// Key indices (and one block past them) stay in int32 inside the kernels.
constexpr std::int64_t kMaxCapacity = kInt32Max - 2 * decode::kBlockKeys;

std::string text(const char* value) { return std::string(value); }
template <class T>
std::string text(T value) {
  if constexpr (std::is_floating_point_v<T>) {
    char buffer[32];
    std::snprintf(buffer, sizeof(buffer), "%g", static_cast<double>(value));
    return buffer;
  } else {
    return std::to_string(value);
  }
}

// A failed Check whose message is the parts concatenated (no iostreams: see validate.cpp).
template <class... Parts>
Check reject(flash4_status status, const Parts&... parts) {
  Check check{status, {}};
  (check.message += ... += text(parts));
  return check;
}

struct NamedInt {
  const char* name;
  std::int64_t value;
};

Check at_least(std::initializer_list<NamedInt> fields, std::int64_t low, flash4_status status) {
  for (const auto& [name, value] : fields) {
    if (value < low) return reject(status, name, " is ", value, "; it must be >= ", low);
  }
  return {};
}

Check check_kind(const flash4_kvcache_params& p) {
  if (p.dtype != FLASH4_DTYPE_BF16 && p.dtype != FLASH4_DTYPE_FP16) {
    return reject(FLASH4_ERROR_UNSUPPORTED_DTYPE, "dtype is ", static_cast<int>(p.dtype),
                  "; allowed: FLASH4_DTYPE_BF16 (0), FLASH4_DTYPE_FP16 (1)");
  }
  // The forward's rule: any pair of multiples of 8 up to the widest decode kernel.
  static_assert(decode::kMaxWidth == 256 && decode::kChunkElements == 8, "the head dims of flash4.h's rule 3");
  return check_head_dims(p.head_dim, p.head_dim_v);
}

Check check_sizes(const flash4_kvcache_params& p) {
  if (Check c = at_least({{"batch", p.batch}, {"seqlen_q", p.seqlen_q}, {"heads_q", p.heads_q},
                          {"heads_kv", p.heads_kv}}, 1, FLASH4_ERROR_INVALID_SIZE);
      !c.ok()) {
    return c;
  }
  if (Check c = at_least({{"seqlen_new", p.seqlen_new}}, 0, FLASH4_ERROR_INVALID_SIZE); !c.ok()) return c;
  if (p.heads_q % p.heads_kv != 0) {
    return reject(FLASH4_ERROR_HEAD_RATIO, "heads_q (", p.heads_q, ") is not a multiple of heads_kv (", p.heads_kv,
                  "); grouped-query attention needs heads_q % heads_kv == 0");
  }
  return {};
}

Check check_cache_layout(const flash4_kvcache_params& p) {
  if (p.block_table != nullptr) {
    if (Check c = at_least({{"page_size", p.page_size}, {"num_pages", p.num_pages},
                            {"max_pages_per_seq", p.max_pages_per_seq}}, 1, FLASH4_ERROR_INVALID_SIZE);
        !c.ok()) {
      return c;
    }
    if (p.block_table_stride < p.max_pages_per_seq) {
      return reject(FLASH4_ERROR_INVALID_ARGUMENT, "block_table_stride is ", p.block_table_stride,
                    "; it must be >= max_pages_per_seq (", p.max_pages_per_seq, "): one row of the table per sequence");
    }
    if (p.cache_batch_idx != nullptr) {
      return reject(FLASH4_ERROR_INVALID_ARGUMENT,
                    "cache_batch_idx is set with a paged cache (block_table); a paged cache selects each sequence's "
                    "pages through its block_table row, so cache_batch_idx must be NULL");
    }
  } else {
    if (Check c = at_least({{"cache_batch", p.cache_batch}, {"cache_seqlen", p.cache_seqlen}}, 1,
                           FLASH4_ERROR_INVALID_SIZE);
        !c.ok()) {
      return c;
    }
    if (p.cache_batch_idx == nullptr && p.cache_batch < p.batch) {
      return reject(FLASH4_ERROR_INVALID_SIZE, "cache_batch is ", p.cache_batch, " but batch is ", p.batch,
                    "; without cache_batch_idx sequence b uses cache sequence b, so cache_batch must be >= batch");
    }
  }
  const std::int64_t capacity = host::kvcache_capacity(p);
  if (capacity > kMaxCapacity) {
    return reject(FLASH4_ERROR_SIZE_OVERFLOW, "the cache holds ", capacity,
                  " keys per sequence (max_pages_per_seq * page_size, or cache_seqlen); at most ", kMaxCapacity,
                  " are supported (key indices are int32)");
  }
  return {};
}

Check check_appends(const flash4_kvcache_params& p) {
  if (p.seqlen_new == 0) return {};
  if (p.k_new == nullptr || p.v_new == nullptr) {
    return reject(FLASH4_ERROR_NULL_POINTER, p.k_new == nullptr ? "k_new" : "v_new", " is NULL but seqlen_new is ",
                  p.seqlen_new, "; appending needs both k_new and v_new");
  }
  if (p.cache_seqlens == nullptr) {
    return reject(FLASH4_ERROR_INVALID_ARGUMENT,
                  "cache_seqlens is NULL but seqlen_new > 0; appending needs cache_seqlens (where the new rows go)");
  }
  if (p.seqlen_new > host::kvcache_capacity(p)) {
    return reject(FLASH4_ERROR_INVALID_SIZE, "seqlen_new is ", p.seqlen_new, " but the cache holds only ",
                  host::kvcache_capacity(p), " keys per sequence");
  }
  return {};
}

Check check_scores_and_mask(const flash4_kvcache_params& p) {
  if (!std::isfinite(p.softmax_scale) || p.softmax_scale <= 0) {
    return reject(FLASH4_ERROR_INVALID_ARGUMENT, "softmax_scale is ", p.softmax_scale,
                  "; it must be finite and > 0 (usually 1/sqrt(head_dim))");
  }
  if (!std::isfinite(p.softcap) || p.softcap < 0) {
    return reject(FLASH4_ERROR_INVALID_ARGUMENT, "softcap is ", p.softcap, "; it must be finite and >= 0 (0: off)");
  }
  if (p.causal != 0 && p.causal != 1) return reject(FLASH4_ERROR_INVALID_MASK, "causal is ", p.causal, "; allowed: 0, 1");
  if (Check c = at_least({{"window_left", p.window_left}, {"window_right", p.window_right}}, -1,
                         FLASH4_ERROR_INVALID_MASK);
      !c.ok()) {
    c.message += " (-1: unbounded)";
    return c;
  }
  if (p.causal == 1 && p.window_right > 0) {
    return reject(FLASH4_ERROR_INVALID_MASK, "window_right is ", p.window_right,
                  " with causal = 1; causal means window_right = 0, so allowed with causal: -1 or 0");
  }
  if (p.num_splits < 0 || p.num_splits > decode::kMaxSplits) {
    return reject(FLASH4_ERROR_INVALID_ARGUMENT, "num_splits is ", p.num_splits, "; allowed: 0 (heuristic) to ",
                  decode::kMaxSplits);
  }
  return {};
}

// A 4-D tensor the kernels read or write: its pointer, strides, the extents of its first three axes and its
// head dim (the columns of a row the kernels touch).
struct Tensor {
  const char* name;
  const void* data;
  flash4_strides strides;
  std::int64_t extent[3];
  std::int64_t columns;
};

std::vector<Tensor> tensors_of(const flash4_kvcache_params& p) {
  const bool paged = p.block_table != nullptr;
  const std::int64_t slots = paged ? p.num_pages : p.cache_batch;
  const std::int64_t rows = paged ? p.page_size : p.cache_seqlen;
  const std::int64_t d = p.head_dim;
  const std::int64_t dv = p.head_dim_v != 0 ? p.head_dim_v : p.head_dim;
  std::vector<Tensor> tensors = {{"q", p.q, p.q_strides, {p.batch, p.seqlen_q, p.heads_q}, d},
                                 {"o", p.o, p.o_strides, {p.batch, p.seqlen_q, p.heads_q}, dv},
                                 {"k_cache", p.k_cache, p.k_cache_strides, {slots, rows, p.heads_kv}, d},
                                 {"v_cache", p.v_cache, p.v_cache_strides, {slots, rows, p.heads_kv}, dv}};
  if (p.seqlen_new > 0) {
    tensors.push_back({"k_new", p.k_new, p.k_new_strides, {p.batch, p.seqlen_new, p.heads_kv}, d});
    tensors.push_back({"v_new", p.v_new, p.v_new_strides, {p.batch, p.seqlen_new, p.heads_kv}, dv});
  }
  return tensors;
}

Check check_memory(const flash4_kvcache_params& p) {
  constexpr const char* kAxes[3] = {"batch", "seq", "head"};
  for (const Tensor& t : tensors_of(p)) {
    if (t.data == nullptr) return reject(FLASH4_ERROR_NULL_POINTER, t.name, " is NULL; it must point to device memory");
    if (reinterpret_cast<std::uintptr_t>(t.data) % kChunkBytes != 0) {
      return reject(FLASH4_ERROR_MISALIGNED, t.name, " is not ", kChunkBytes,
                    "-byte aligned; the kernels move 16-byte chunks");
    }
    const std::int64_t strides[3] = {t.strides.batch, t.strides.seq, t.strides.head};
    // The largest element offset the kernels touch, in int64 (an axis of extent 1 is only indexed by 0, so
    // its stride is never used and not checked: torch gives such axes arbitrary strides).
    std::int64_t largest = t.columns - 1;
    for (int axis = 0; axis < 3; ++axis) {
      if (t.extent[axis] == 1) continue;
      const std::int64_t stride = strides[axis];
      if (stride <= 0 || stride * kElementBytes % kChunkBytes != 0) {
        return reject(stride <= 0 ? FLASH4_ERROR_INVALID_ARGUMENT : FLASH4_ERROR_MISALIGNED, t.name, "_strides.",
                      kAxes[axis], " is ", stride, "; strides must be > 0 and multiples of ", kChunkBytes / kElementBytes,
                      " elements (16 bytes)");
      }
      std::int64_t reach = 0;
      if (__builtin_mul_overflow(t.extent[axis] - 1, stride, &reach) ||
          __builtin_add_overflow(largest, reach, &largest)) {
        return reject(FLASH4_ERROR_SIZE_OVERFLOW, t.name, ": the largest offset its sizes and strides reach overflows int64");
      }
    }
    if (largest > std::numeric_limits<std::int64_t>::max() / kElementBytes) {
      return reject(FLASH4_ERROR_SIZE_OVERFLOW, t.name, ": the largest byte offset overflows int64");
    }
  }
  const struct {
    const char* name;
    const void* data;
  } small[] = {{"lse", p.lse}, {"cache_seqlens", p.cache_seqlens}, {"cache_batch_idx", p.cache_batch_idx},
               {"block_table", p.block_table}};
  for (const auto& [name, data] : small) {
    if (reinterpret_cast<std::uintptr_t>(data) % 4 != 0) {
      return reject(FLASH4_ERROR_MISALIGNED, name, " is not 4-byte aligned (an array of 32-bit values)");
    }
  }
  return {};
}

// Rows, (row, head) pairs and CTAs the kernels count in int32.
Check check_counts(const flash4_kvcache_params& p) {
  const std::int64_t rows = std::int64_t{p.seqlen_q} * (p.heads_q / p.heads_kv);
  const std::int64_t output_rows = std::int64_t{p.batch} * p.seqlen_q * p.heads_q;
  const std::int64_t row_blocks = (rows + decode::kMaxRowsPerCta - 1) / decode::kMaxRowsPerCta;
  const double ctas = static_cast<double>(row_blocks) * p.heads_kv * p.batch * decode::kMaxSplits;
  if (rows > kInt32Max || output_rows > kInt32Max || ctas > static_cast<double>(kInt32Max)) {
    return reject(FLASH4_ERROR_SIZE_OVERFLOW, "batch (", p.batch, ") x seqlen_q (", p.seqlen_q, ") x heads_q (",
                  p.heads_q, ") is too large: output rows, packed rows per KV head and CTAs are counted in int32");
  }
  return {};
}

}  // namespace

bool is_known_struct_size(const flash4_kvcache_params& params) {
  for (std::size_t size : kStructSizes) {
    if (params.struct_size == size) return true;
  }
  return false;
}

Check validate_kvcache(const flash4_kvcache_params& p) {
  if (!is_known_struct_size(p)) {
    return reject(FLASH4_ERROR_INVALID_STRUCT_SIZE, "params.struct_size is ", p.struct_size,
                  "; this library knows flash4_kvcache_params layouts of ", kStructSizes[0], ", ", kStructSizes[1],
                  " bytes (set struct_size = sizeof(flash4_kvcache_params))");
  }
  for (Check (*check)(const flash4_kvcache_params&) :
       {check_kind, check_sizes, check_cache_layout, check_appends, check_scores_and_mask, check_memory, check_counts}) {
    if (Check c = check(p); !c.ok()) return c;
  }
  return {};
}

flash4_kvcache_params canonicalize(const flash4_kvcache_params& params) {
  flash4_kvcache_params p = params;
  if (p.causal == 1) p.window_right = 0;
  if (p.head_dim_v == 0) p.head_dim_v = p.head_dim;
  return p;
}

}  // namespace flash4::api
