// Internal to validation (validate.cpp: the rules on values; validate_memory.cpp: the rules on memory, 9-12 of
// flash4.h): the view of a params struct that both directions share, and the message builder.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "api/validate.hpp"
#include "flash4/flash4.h"

namespace flash4::api::detail {

constexpr std::int64_t kElementBytes = 2;  // bf16 and fp16 alike

// The fields both directions share, read once from either params struct.
struct Problem {
  std::int32_t dtype;  // as an integer: see dtype_of
  std::int32_t batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim;
  std::int32_t head_dim_v;  // as given: 0 means head_dim (dim_v)
  float softmax_scale;
  std::int32_t causal, window_left, window_right;
  float softcap;
  const std::int32_t* cu_seqlens_q;
  const std::int32_t* cu_seqlens_k;
  std::int32_t max_seqlen_q, max_seqlen_k, total_q, total_k;
  // Fields appended to the structs after their first layout (NULL when the caller's layout predates them).
  const float* sink = nullptr;
  const float* dsink = nullptr;  // backward only
  const std::int32_t* seqused_q = nullptr;
  const std::int32_t* seqused_k = nullptr;
  bool backward = false;
  // Paged K/V (the forward only; the backward's view leaves them NULL / 0).
  const std::int32_t* block_table = nullptr;
  std::int64_t block_table_stride = 0;
  std::int32_t page_size = 0, num_pages = 0;

  // Only meaningful once the pair of cu_seqlens pointers has been accepted (rule 4).
  bool varlen() const { return cu_seqlens_q != nullptr; }
  bool paged() const { return block_table != nullptr; }
  // The head dim of v, o, dout and dv.
  std::int32_t dim_v() const { return head_dim_v != 0 ? head_dim_v : head_dim; }
};

// The dtype field as an integer. Loading a flash4_dtype object that holds a value outside the enum's range is
// undefined behaviour, and a compiler may assume it never happens (-fstrict-enums folded the range check away,
// accepting 2, -1 and 255), so the field's bytes are copied instead of loaded as the enum.
template <class Params>
std::int32_t dtype_of(const Params& p) {
  static_assert(sizeof(p.dtype) == sizeof(std::int32_t), "flash4_dtype is an int-sized enum on every supported ABI");
  std::int32_t value = 0;
  std::memcpy(&value, &p.dtype, sizeof(value));
  return value;
}

template <class Params>
Problem problem_of(const Params& p) {
  Problem problem{dtype_of(p),     p.batch,        p.seqlen_q,     p.seqlen_k,      p.heads_q,     p.heads_kv,
                  p.head_dim,      p.head_dim_v,   p.softmax_scale, p.causal,       p.window_left, p.window_right,
                  p.softcap,       p.cu_seqlens_q, p.cu_seqlens_k, p.max_seqlen_q, p.max_seqlen_k, p.total_q,
                  p.total_k};
  problem.backward = std::is_same_v<Params, flash4_bwd_params>;
  // A struct of the first layout (a smaller struct_size) has no such fields, whatever its bytes there hold.
  if (p.struct_size != sizeof(Params)) return problem;
  problem.sink = p.sink;
  problem.seqused_q = p.seqused_q;
  problem.seqused_k = p.seqused_k;
  if constexpr (std::is_same_v<Params, flash4_bwd_params>) problem.dsink = p.dsink;
  return problem;
}

// A caller of the first layout (struct_size = the offset of head_dim_v) has no paged fields: whatever lies past its
// struct is not read (the C ABI's load step zeroes it too).
inline Problem problem_of(const flash4_fwd_params& p) {
  Problem problem = problem_of<flash4_fwd_params>(p);
  if (p.struct_size <= offsetof(flash4_fwd_params, head_dim_v)) return problem;
  problem.block_table = p.block_table;
  problem.block_table_stride = p.block_table_stride;
  problem.page_size = p.page_size;
  problem.num_pages = p.num_pages;
  return problem;
}

// A named integer field, so that fields sharing a rule are checked in one loop.
struct Field {
  const char* name;
  std::int64_t value;
};
using Fields = std::initializer_list<Field>;

// Query-shaped tensors have the query rows and heads_q heads; key-shaped ones the key rows and heads_kv.
enum class Side { query, key };

// Whether one side's tensors are the pages of a paged cache (k and v with block_table set).
inline bool paged(const Problem& p, Side side) { return side == Side::key && p.paged(); }

// Rows of one side's tensors in the (batch * seq) or packed (total) sense, or the cache's num_pages * page_size
// when paged; < 2^62, a product of two int32.
inline std::int64_t rows(const Problem& p, Side side) {
  const bool query = side == Side::query;
  if (paged(p, side)) return std::int64_t{p.num_pages} * p.page_size;
  if (p.varlen()) return query ? p.total_q : p.total_k;
  return std::int64_t{p.batch} * (query ? p.seqlen_q : p.seqlen_k);
}

// The longest sequence: the fixed length, or max_seqlen no larger than all rows (flash4.h, "How valid params
// are read").
inline std::int64_t longest(const Problem& p, Side side) {
  const bool query = side == Side::query;
  if (!p.varlen()) return query ? p.seqlen_q : p.seqlen_k;
  return query ? std::min(p.max_seqlen_q, p.total_q) : std::min(p.max_seqlen_k, p.total_k);
}

// Paged: the block-table entries a sequence's row must hold, ceil(Lk / page_size) (page_size >= 16: rule 6).
inline std::int64_t pages_per_sequence(const Problem& p) {
  return (longest(p, Side::key) + p.page_size - 1) / p.page_size;
}

inline std::int64_t heads(const Problem& p, Side side) { return side == Side::query ? p.heads_q : p.heads_kv; }

// One of q, k, v, o, dout, dq, dk, dv.
struct Tensor {
  const char* name;  // the params field, e.g. "q"; its strides are "<name>_strides"
  const void* data;
  flash4_strides strides;
  Side side;
  bool output;
  std::int32_t head_dim;  // its columns: head_dim (q, k, dq, dk) or dim_v() (v, o, dout, dv)
};

// The lse array: the forward's optional output, the backward's required input.
struct Lse {
  const void* data;
  bool required;
  bool output;
};

// Message text without iostreams: the library is loaded into processes (Python with torch) where a
// second C++ runtime may already own the locale machinery that std::ostringstream initializes, and
// constructing one there crashed the error path on the H200 (tests/python, 2026-12-02).
template <class T>
void append(std::string& out, const T& value) {
  if constexpr (std::is_convertible_v<const T&, std::string_view>) {
    out += std::string_view(value);
  } else if constexpr (std::is_floating_point_v<T>) {
    char text[32];
    std::snprintf(text, sizeof(text), "%g", static_cast<double>(value));
    out += text;
  } else {
    out += std::to_string(value);
  }
}

template <class... Parts>
Check fail(flash4_status status, const Parts&... parts) {
  std::string message;
  (append(message, parts), ...);
  return Check{status, std::move(message)};
}

// Rules 9-12 of flash4.h: pointers, strides, size limits, overlapping memory.
Check check_memory(const Problem& p, const std::vector<Tensor>& tensors, Lse lse);

}  // namespace flash4::api::detail
