// Validation rules for flash4_fwd_params / flash4_bwd_params. Both directions share one Problem view and one
// list of tensors, so every rule is written once; the order of the checks is the order a reader fixes things
// in (what kind of problem, its sizes, its mask, then the memory it points at).
#include "api/validate.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <limits>
#include <optional>
#include <cstdio>
#include <string_view>
#include <type_traits>
#include <vector>

#include "host/empty_problem.hpp"

namespace flash4::api {
namespace {

// Sizes of every released layout, oldest first. Appending a field to a params struct appends its new sizeof
// here, and the shims' load step (c_api.cpp) gives the new field its default for callers of older layouts.
constexpr std::size_t kFwdStructSizes[] = {sizeof(flash4_fwd_params)};
constexpr std::size_t kBwdStructSizes[] = {sizeof(flash4_bwd_params)};

constexpr int kHeadDims[] = {64, 96, 128, 192, 256};
constexpr std::int64_t kElementBytes = 2;  // bf16 and fp16 alike
// TMA (cp.async.bulk.tensor) loads and stores q, k, v and o: it needs 16-byte aligned base addresses and
// strides, and cuTensorMapEncodeTiled rejects strides of 2^40 bytes or more.
constexpr std::int64_t kTmaAlignBytes = 16;
constexpr std::int64_t kTmaMaxStrideBytes = std::int64_t{1} << 40;
// LSE is fp32, written and read with plain loads and stores; cu_seqlens are int32.
constexpr std::uintptr_t kLseAlignBytes = alignof(float);
constexpr std::uintptr_t kCuSeqlensAlignBytes = alignof(std::int32_t);
// The kernels index (row, head) pairs, LSE entries and tiles with int32: a 64-bit index costs two registers
// and several instructions per operation in consumer warpgroups whose registers are spent on the O
// accumulator, and the persistent scheduler's linear tile index is an int (kernels/common/tile_order.hpp).
// Every such count must therefore fit in int32; a tile holds at least one row, so bounding rows * heads
// bounds the tile count as well.
constexpr std::int64_t kMaxIndex = std::numeric_limits<std::int32_t>::max();

// The fields both directions share, read once from either params struct.
struct Problem {
  flash4_dtype dtype;
  std::int32_t batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim;
  float softmax_scale;
  std::int32_t causal, window_left, window_right;
  float softcap;
  const std::int32_t* cu_seqlens_q;
  const std::int32_t* cu_seqlens_k;
  std::int32_t max_seqlen_q, max_seqlen_k, total_q, total_k;

  // Only meaningful once check_varlen has accepted the pair of cu_seqlens pointers.
  bool varlen() const { return cu_seqlens_q != nullptr; }
};

template <class Params>
Problem problem_of(const Params& p) {
  return Problem{p.dtype,        p.batch,         p.seqlen_q,     p.seqlen_k,     p.heads_q,      p.heads_kv,
                 p.head_dim,     p.softmax_scale, p.causal,       p.window_left,  p.window_right, p.softcap,
                 p.cu_seqlens_q, p.cu_seqlens_k,  p.max_seqlen_q, p.max_seqlen_k, p.total_q,      p.total_k};
}

// Query-shaped tensors have the query rows and heads_q heads; key-shaped ones the key rows and heads_kv.
enum class Side { query, key };

struct Tensor {
  const char* name;  // the params field, e.g. "q"; its strides are "<name>_strides"
  const void* data;
  flash4_strides strides;
  Side side;
};

// Rows of a tensor in the (batch * seq) or packed (total) sense. A tensor without rows is never accessed, so
// its pointer and strides are not checked: PyTorch, for one, gives empty tensors a NULL data pointer.
std::int64_t rows(const Problem& p, Side side) {
  const bool query = side == Side::query;
  if (p.varlen()) return query ? p.total_q : p.total_k;
  return std::int64_t{p.batch} * (query ? p.seqlen_q : p.seqlen_k);
}

// The forward's optional or the backward's required LSE; it has rows(query) * heads_q entries.
struct Lse {
  const void* data;
  bool required;
};

// A named integer field, so that fields sharing a rule are checked in one loop.
struct Field {
  const char* name;
  std::int64_t value;
};
using Fields = std::initializer_list<Field>;

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
  } else if constexpr (std::is_enum_v<T>) {
    out += std::to_string(static_cast<long long>(value));
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

const char* dtype_name(flash4_dtype dtype) { return dtype == FLASH4_DTYPE_BF16 ? "bf16" : "fp16"; }

template <std::size_t N>
std::string list(const std::size_t (&values)[N]) {
  std::string text;
  for (std::size_t i = 0; i < N; ++i) text += (i ? ", " : "") + std::to_string(values[i]);
  return text;
}

template <std::size_t N>
bool contains(const std::size_t (&values)[N], std::size_t value) {
  return std::find(std::begin(values), std::end(values), value) != std::end(values);
}

template <std::size_t N>
Check check_struct_size(std::size_t size, const std::size_t (&known)[N], const char* type) {
  if (contains(known, size)) return {};
  return fail(FLASH4_ERROR_INVALID_STRUCT_SIZE, "params.struct_size is ", size, "; this library knows ", type,
              " layouts of ", list(known), " bytes (set struct_size = sizeof(", type, "))");
}

Check check_kind(const Problem& p) {
  if (p.dtype != FLASH4_DTYPE_BF16 && p.dtype != FLASH4_DTYPE_FP16) {
    return fail(FLASH4_ERROR_UNSUPPORTED_DTYPE, "dtype is ", static_cast<int>(p.dtype),
                "; allowed: FLASH4_DTYPE_BF16 (0), FLASH4_DTYPE_FP16 (1)");
  }
  if (std::find(std::begin(kHeadDims), std::end(kHeadDims), p.head_dim) == std::end(kHeadDims)) {
    return fail(FLASH4_ERROR_UNSUPPORTED_HEAD_DIM, "head_dim is ", p.head_dim, "; allowed: 64, 96, 128, 192, 256");
  }
  return {};
}

Check check_sizes(const Problem& p) {
  for (const auto& [name, value] : Fields{{"batch", p.batch}, {"heads_q", p.heads_q}, {"heads_kv", p.heads_kv}}) {
    if (value < 1) return fail(FLASH4_ERROR_INVALID_SIZE, name, " is ", value, "; ", name, " must be >= 1");
  }
  // Varlen calls take their lengths from cu_seqlens and ignore seqlen_q / seqlen_k.
  if (!p.varlen()) {
    for (const auto& [name, value] : Fields{{"seqlen_q", p.seqlen_q}, {"seqlen_k", p.seqlen_k}}) {
      if (value < 0) {
        return fail(FLASH4_ERROR_INVALID_SIZE, name, " is ", value, "; ", name,
                    " must be >= 0 (0 is an empty problem: no attention kernel runs)");
      }
    }
  }
  if (p.heads_q % p.heads_kv != 0) {
    return fail(FLASH4_ERROR_HEAD_RATIO, "heads_q (", p.heads_q, ") is not a multiple of heads_kv (", p.heads_kv,
                "); grouped-query attention needs heads_q % heads_kv == 0");
  }
  return {};
}

Check check_scores(const Problem& p) {
  if (!std::isfinite(p.softmax_scale) || p.softmax_scale <= 0) {
    return fail(FLASH4_ERROR_INVALID_ARGUMENT, "softmax_scale is ", p.softmax_scale,
                "; it must be finite and > 0 (usually 1/sqrt(head_dim))");
  }
  if (!std::isfinite(p.softcap) || p.softcap < 0) {
    return fail(FLASH4_ERROR_INVALID_ARGUMENT, "softcap is ", p.softcap, "; it must be finite and >= 0 (0: off)");
  }
  return {};
}

Check check_mask(const Problem& p) {
  if (p.causal != 0 && p.causal != 1) {
    return fail(FLASH4_ERROR_INVALID_MASK, "causal is ", p.causal, "; allowed: 0, 1");
  }
  for (const auto& [name, value] : Fields{{"window_left", p.window_left}, {"window_right", p.window_right}}) {
    if (value < -1) {
      return fail(FLASH4_ERROR_INVALID_MASK, name, " is ", value, "; allowed: -1 (unbounded) or >= 0");
    }
  }
  // causal = 1 is the window (window_left, 0); a wider right edge would contradict it.
  if (p.causal == 1 && p.window_right > 0) {
    return fail(FLASH4_ERROR_INVALID_MASK, "window_right is ", p.window_right,
                " with causal = 1; causal means window_right = 0, so allowed with causal: -1 or 0");
  }
  return {};
}

Check check_varlen(const Problem& p) {
  if ((p.cu_seqlens_q == nullptr) != (p.cu_seqlens_k == nullptr)) {
    return fail(FLASH4_ERROR_INVALID_VARLEN,
                p.cu_seqlens_q ? "cu_seqlens_k is NULL but cu_seqlens_q is set"
                               : "cu_seqlens_q is NULL but cu_seqlens_k is set",
                "; varlen needs both cu_seqlens_q and cu_seqlens_k, fixed-length calls neither");
  }
  if (!p.varlen()) return {};
  for (const auto& [name, value] : Fields{{"max_seqlen_q", p.max_seqlen_q}, {"max_seqlen_k", p.max_seqlen_k}}) {
    if (value < 1) {
      return fail(FLASH4_ERROR_INVALID_VARLEN, name, " is ", value,
                  "; varlen calls need max_seqlen_q, max_seqlen_k >= 1 (a bound on every sequence's length)");
    }
  }
  for (const auto& [name, value] : Fields{{"total_q", p.total_q}, {"total_k", p.total_k}}) {
    if (value < 0) {
      return fail(FLASH4_ERROR_INVALID_VARLEN, name, " is ", value,
                  "; it must be >= 0 (the rows of the packed tensors, cu_seqlens[batch])");
    }
  }
  if (reinterpret_cast<std::uintptr_t>(p.cu_seqlens_q) % kCuSeqlensAlignBytes != 0) {
    return fail(FLASH4_ERROR_MISALIGNED, "cu_seqlens_q is not ", kCuSeqlensAlignBytes,
                "-byte aligned (int32 array)");
  }
  if (reinterpret_cast<std::uintptr_t>(p.cu_seqlens_k) % kCuSeqlensAlignBytes != 0) {
    return fail(FLASH4_ERROR_MISALIGNED, "cu_seqlens_k is not ", kCuSeqlensAlignBytes,
                "-byte aligned (int32 array)");
  }
  return {};
}

Check check_pointers(const Problem& p, const std::vector<Tensor>& tensors, Lse lse) {
  for (const Tensor& t : tensors) {
    if (rows(p, t.side) == 0) continue;
    if (t.data == nullptr) {
      return fail(FLASH4_ERROR_NULL_POINTER, t.name, " is NULL; it must point to device memory");
    }
    if (reinterpret_cast<std::uintptr_t>(t.data) % kTmaAlignBytes != 0) {
      return fail(FLASH4_ERROR_MISALIGNED, t.name, " is not ", kTmaAlignBytes,
                  "-byte aligned; TMA needs 16-byte aligned base addresses");
    }
  }
  if (lse.data == nullptr && lse.required && rows(p, Side::query) > 0) {
    return fail(FLASH4_ERROR_NULL_POINTER, "lse is NULL; the backward needs the lse written by flash4_fwd");
  }
  if (reinterpret_cast<std::uintptr_t>(lse.data) % kLseAlignBytes != 0) {
    return fail(FLASH4_ERROR_MISALIGNED, "lse is not ", kLseAlignBytes, "-byte aligned (fp32 array)");
  }
  return {};
}

Check check_stride(const Tensor& t, const char* field, std::int64_t stride, flash4_dtype dtype) {
  if (stride <= 0) {
    return fail(FLASH4_ERROR_INVALID_ARGUMENT, t.name, "_strides.", field, " is ", stride,
                "; strides are in elements and must be > 0");
  }
  if (stride >= kTmaMaxStrideBytes / kElementBytes) {
    return fail(FLASH4_ERROR_SIZE_OVERFLOW, t.name, "_strides.", field, " is ", stride,
                " elements; TMA strides must be < 2^40 bytes");
  }
  if (stride * kElementBytes % kTmaAlignBytes != 0) {
    return fail(FLASH4_ERROR_MISALIGNED, t.name, "_strides.", field, " is ", stride, " elements (",
                stride * kElementBytes, " bytes); every stride must be a multiple of ", kTmaAlignBytes, " bytes (",
                kTmaAlignBytes / kElementBytes, " elements of ", dtype_name(dtype), ")");
  }
  return {};
}

Check check_strides(const Problem& p, const std::vector<Tensor>& tensors) {
  for (const Tensor& t : tensors) {
    if (rows(p, t.side) == 0) continue;
    // Varlen tensors are packed (total, heads, dim): their batch stride is ignored.
    if (!p.varlen()) {
      if (Check c = check_stride(t, "batch", t.strides.batch, p.dtype); !c.ok()) return c;
    }
    if (Check c = check_stride(t, "seq", t.strides.seq, p.dtype); !c.ok()) return c;
    if (Check c = check_stride(t, "head", t.strides.head, p.dtype); !c.ok()) return c;
  }
  return {};
}

// a * b + c in int64, or nothing on overflow.
std::optional<std::int64_t> mul_add(std::int64_t a, std::int64_t b, std::int64_t c) {
  std::int64_t product = 0;
  std::int64_t sum = 0;
  if (__builtin_mul_overflow(a, b, &product) || __builtin_add_overflow(product, c, &sum)) return std::nullopt;
  return sum;
}

Check check_overflow(const Problem& p, const std::vector<Tensor>& tensors) {
  for (const Tensor& t : tensors) {
    const std::int64_t all_rows = rows(p, t.side);  // < 2^62: a product of two int32
    if (all_rows == 0) continue;
    const std::int64_t heads = t.side == Side::query ? p.heads_q : p.heads_kv;
    // all_rows * heads > kMaxIndex, by division so that it cannot overflow.
    if (all_rows > kMaxIndex / heads) {
      return fail(FLASH4_ERROR_SIZE_OVERFLOW, t.name, ": ", all_rows, " rows x ", heads, " heads is more than ",
                  kMaxIndex, " (row, head) pairs; the kernels index rows, LSE entries and tiles with int32");
    }
    const std::int64_t batch = p.varlen() ? 1 : p.batch;
    const std::int64_t seqlen = all_rows / batch;
    // The largest element offset the kernel can touch, then its byte offset, must fit in int64.
    std::optional<std::int64_t> offset = p.head_dim - 1;
    if (offset) offset = mul_add(heads - 1, t.strides.head, *offset);
    if (offset) offset = mul_add(seqlen - 1, t.strides.seq, *offset);
    if (offset) offset = mul_add(batch - 1, t.strides.batch, *offset);
    if (offset) offset = mul_add(*offset, kElementBytes, kElementBytes - 1);
    if (!offset) {
      return fail(FLASH4_ERROR_SIZE_OVERFLOW, t.name,
                  ": the largest byte offset its sizes and strides reach overflows int64");
    }
  }
  return {};
}

Check validate(const Problem& p, const std::vector<Tensor>& tensors, Lse lse) {
  // check_varlen runs before the size checks because they read p.varlen(), which assumes a consistent pair.
  for (Check (*check)(const Problem&) : {check_kind, check_varlen, check_sizes, check_scores, check_mask}) {
    if (Check c = check(p); !c.ok()) return c;
  }
  if (Check c = check_pointers(p, tensors, lse); !c.ok()) return c;
  if (Check c = check_strides(p, tensors); !c.ok()) return c;
  return check_overflow(p, tensors);
}

template <class Params>
Params canonical(Params p) {
  if (p.causal == 1) p.window_right = 0;
  return p;
}

}  // namespace

bool is_known_struct_size(const flash4_fwd_params& params) {
  return contains(kFwdStructSizes, params.struct_size);
}
bool is_known_struct_size(const flash4_bwd_params& params) {
  return contains(kBwdStructSizes, params.struct_size);
}

Check validate_fwd(const flash4_fwd_params& p) {
  if (Check c = check_struct_size(p.struct_size, kFwdStructSizes, "flash4_fwd_params"); !c.ok()) return c;
  const std::vector<Tensor> tensors = {{"q", p.q, p.q_strides, Side::query},
                                       {"k", p.k, p.k_strides, Side::key},
                                       {"v", p.v, p.v_strides, Side::key},
                                       {"o", p.o, p.o_strides, Side::query}};
  return validate(problem_of(p), tensors, Lse{p.lse, false});
}

Check validate_bwd(const flash4_bwd_params& p) {
  if (Check c = check_struct_size(p.struct_size, kBwdStructSizes, "flash4_bwd_params"); !c.ok()) return c;
  if (p.deterministic != 0 && p.deterministic != 1) {
    return fail(FLASH4_ERROR_INVALID_ARGUMENT, "deterministic is ", p.deterministic, "; allowed: 0, 1");
  }
  const std::vector<Tensor> tensors = {{"q", p.q, p.q_strides, Side::query},
                                       {"k", p.k, p.k_strides, Side::key},
                                       {"v", p.v, p.v_strides, Side::key},
                                       {"o", p.o, p.o_strides, Side::query},
                                       {"dout", p.dout, p.dout_strides, Side::query},
                                       {"dq", p.dq, p.dq_strides, Side::query},
                                       {"dk", p.dk, p.dk_strides, Side::key},
                                       {"dv", p.dv, p.dv_strides, Side::key}};
  return validate(problem_of(p), tensors, Lse{p.lse, true});
}

bool is_empty(const flash4_fwd_params& params) { return host::is_empty_problem(params); }
bool is_empty(const flash4_bwd_params& params) { return host::is_empty_problem(params); }

flash4_fwd_params canonicalize(const flash4_fwd_params& params) { return canonical(params); }
flash4_bwd_params canonicalize(const flash4_bwd_params& params) { return canonical(params); }

}  // namespace flash4::api
