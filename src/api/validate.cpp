// Validation rules 1-8 of flash4.h (what kind of problem, its sizes, its scores and mask) and the entry points;
// rules 9-12 (the memory the params point at) are in validate_memory.cpp. Both directions share one Problem
// view and one list of tensors, so every rule is written once, in the order flash4.h lists them.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <tuple>
#include <utility>

#include "api/validate_parts.hpp"
#include "host/empty_problem.hpp"

namespace flash4::api {
namespace {

using detail::fail;
using detail::Fields;
using detail::Problem;
using detail::Side;
using detail::Tensor;

// Sizes of every released layout, oldest first: an older layout ends where the first field appended after
// it begins. Appending a field to a params struct appends its new sizeof here, and the shims' load step
// (entry.hpp) gives the new field its default for callers of older layouts.
constexpr std::size_t kFwdStructSizes[] = {offsetof(flash4_fwd_params, head_dim_v), sizeof(flash4_fwd_params)};
constexpr std::size_t kBwdStructSizes[] = {offsetof(flash4_bwd_params, head_dim_v), sizeof(flash4_bwd_params)};

// Head dims: rows of whole 16-byte units (TMA's stride and box granularity, 8 bf16 or fp16 elements), up
// to the widest kernel. Which built kernel serves a dim is the host's choice (host/kernel_choice.hpp).
constexpr int kHeadDimMultiple = 8;
constexpr int kMaxHeadDim = 256;
// The kernels' exponentials are base 2: the host derives scale * log2(e) (or softcap * log2(e)) in fp32
// (src/host/dispatch), so the validator derives the same fp32 values to check that they are finite.
constexpr float kLog2e = 1.4426950408889634f;

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
    return fail(FLASH4_ERROR_UNSUPPORTED_DTYPE, "dtype is ", p.dtype,
                "; allowed: FLASH4_DTYPE_BF16 (0), FLASH4_DTYPE_FP16 (1)");
  }
  return check_head_dims(p.head_dim, p.head_dim_v);
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
  constexpr std::uintptr_t kCuSeqlensAlignBytes = alignof(std::int32_t);
  for (const auto& [name, pointer] : {std::pair{"cu_seqlens_q", p.cu_seqlens_q}, std::pair{"cu_seqlens_k", p.cu_seqlens_k}}) {
    if (reinterpret_cast<std::uintptr_t>(pointer) % kCuSeqlensAlignBytes != 0) {
      return fail(FLASH4_ERROR_MISALIGNED, name, " is not ", kCuSeqlensAlignBytes, "-byte aligned (int32 array)");
    }
  }
  return {};
}

// seqused_q / seqused_k are allowed with fixed length and varlen alike (as in FlashAttention 3).
Check check_seqused(const Problem& p) {
  for (const auto& [name, pointer] : {std::pair{"seqused_q", p.seqused_q}, std::pair{"seqused_k", p.seqused_k}}) {
    if (reinterpret_cast<std::uintptr_t>(pointer) % alignof(std::int32_t) != 0) {
      return fail(FLASH4_ERROR_MISALIGNED, name, " is not ", alignof(std::int32_t), "-byte aligned (int32 array)");
    }
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

// batch sequences of at most max_seqlen rows each hold at most batch * max_seqlen rows: more would mean some
// sequence is longer than max_seqlen, and the grid and workspace sized by it too small.
Check check_varlen_totals(const Problem& p) {
  if (!p.varlen()) return {};
  for (const auto& [total, max_seqlen, total_name, max_name] :
       {std::tuple{p.total_q, p.max_seqlen_q, "total_q", "max_seqlen_q"},
        std::tuple{p.total_k, p.max_seqlen_k, "total_k", "max_seqlen_k"}}) {
    if (total > std::int64_t{p.batch} * max_seqlen) {
      return fail(FLASH4_ERROR_INVALID_VARLEN, total_name, " is ", total, ", more than batch (", p.batch, ") x ",
                  max_name, " (", max_seqlen, "); some sequence would be longer than ", max_name);
    }
  }
  return {};
}

// A paged cache's pages are loaded as TMA boxes of gcd(page_size, block_n) rows, one page each (block_n, the
// forward's keys per stage, is a multiple of 16 in every tile config). A box must start on a whole swizzle
// atom (8 rows) of the stage so that TMA writes the layout wgmma reads; a multiple of 16 also keeps a key
// block to at most block_n / 16 boxes per column slice, few enough for the one producer thread to issue.
constexpr int kPageSizeMultiple = 16;

Check check_paged(const Problem& p) {
  if (!p.paged()) return {};
  if (p.page_size < kPageSizeMultiple || p.page_size % kPageSizeMultiple != 0) {
    return fail(FLASH4_ERROR_INVALID_SIZE, "page_size is ", p.page_size, "; a paged cache needs a positive multiple of ",
                kPageSizeMultiple, " rows per page");
  }
  if (p.num_pages < 1) {
    return fail(FLASH4_ERROR_INVALID_SIZE, "num_pages is ", p.num_pages, "; a paged cache has at least one page");
  }
  constexpr std::uintptr_t kBlockTableAlignBytes = alignof(std::int32_t);
  if (reinterpret_cast<std::uintptr_t>(p.block_table) % kBlockTableAlignBytes != 0) {
    return fail(FLASH4_ERROR_MISALIGNED, "block_table is not ", kBlockTableAlignBytes, "-byte aligned (int32 array)");
  }
  if (p.block_table_stride < detail::pages_per_sequence(p)) {
    return fail(FLASH4_ERROR_INVALID_ARGUMENT, "block_table_stride is ", p.block_table_stride, "; a row of the table must ",
                "hold the ", detail::pages_per_sequence(p), " pages of the longest key sequence (", 
                detail::longest(p, Side::key), " keys of ", p.page_size, " per page)");
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
  // The constants the kernels take (fp32, as src/host/dispatch derives them).
  if (p.softcap == 0) {
    if (!std::isfinite(p.softmax_scale * kLog2e)) {
      return fail(FLASH4_ERROR_INVALID_ARGUMENT, "softmax_scale is ", p.softmax_scale,
                  "; softmax_scale * log2(e) overflows fp32");
    }
    return {};
  }
  if (!std::isfinite(p.softcap * kLog2e)) {
    return fail(FLASH4_ERROR_INVALID_ARGUMENT, "softcap is ", p.softcap, "; softcap * log2(e) overflows fp32");
  }
  if (!std::isfinite(p.softmax_scale / p.softcap)) {
    return fail(FLASH4_ERROR_INVALID_ARGUMENT, "softcap is ", p.softcap, "; softmax_scale / softcap (",
                p.softmax_scale, " / ", p.softcap, ") overflows fp32");
  }
  return {};
}

Check check_mask(const Problem& p) {
  if (p.causal != 0 && p.causal != 1) {
    return fail(FLASH4_ERROR_INVALID_MASK, "causal is ", p.causal, "; allowed: 0, 1");
  }
  // causal = 1 reads as a right edge of 0 whatever window_right holds (FlashAttention's meaning), so any
  // window_right the rule allows without causal is allowed with it.
  for (const auto& [name, value] : Fields{{"window_left", p.window_left}, {"window_right", p.window_right}}) {
    if (value < -1) {
      return fail(FLASH4_ERROR_INVALID_MASK, name, " is ", value, "; allowed: -1 (unbounded) or >= 0");
    }
  }
  return {};
}

Check validate(const Problem& p, const std::vector<Tensor>& tensors, detail::Lse lse) {
  // check_varlen runs before the size checks because they read p.varlen(), which assumes a consistent pair.
  for (Check (*check)(const Problem&) :
       {check_kind, check_varlen, check_seqused, check_sizes, check_varlen_totals, check_paged, check_scores, check_mask}) {
    if (Check c = check(p); !c.ok()) return c;
  }
  return detail::check_memory(p, tensors, lse);
}

template <class Params>
Params canonical(Params p) {
  if (p.head_dim_v == 0) p.head_dim_v = p.head_dim;
  const bool varlen = p.cu_seqlens_q != nullptr;
  // The lengths that bound every sequence: fixed lengths, or max_seqlen no larger than all rows.
  const std::int32_t longest_q = varlen ? std::min(p.max_seqlen_q, p.total_q) : p.seqlen_q;
  const std::int32_t longest_k = varlen ? std::min(p.max_seqlen_k, p.total_k) : p.seqlen_k;
  if (varlen) {
    // max(total, 1) keeps max_seqlen >= 1 (rule 4) for an empty problem, which runs no planner anyway.
    p.max_seqlen_q = std::max(longest_q, 1);
    p.max_seqlen_k = std::max(longest_k, 1);
  }
  // Query i sees key j >= i + Sk - Sq - left: for every i and j < Sk when left >= Sk - 1; and j <= i + Sk - Sq
  // + right for every i and j when right >= Sq - 1. Such an edge is no edge, and as -1 it keeps the kernels'
  // mask sums (lengths plus a window) within int32 (rule 11's lengths leave room for a few of them).
  if (p.window_left >= longest_k) p.window_left = -1;
  if (p.causal == 1) {
    p.window_right = 0;
  } else if (p.window_right >= longest_q) {
    p.window_right = -1;
  }
  return p;
}

}  // namespace

Check check_head_dims(std::int32_t head_dim, std::int32_t head_dim_v) {
  const auto supported = [](std::int32_t dim) {
    return dim >= kHeadDimMultiple && dim <= kMaxHeadDim && dim % kHeadDimMultiple == 0;
  };
  if (!supported(head_dim)) {
    return fail(FLASH4_ERROR_UNSUPPORTED_HEAD_DIM, "head_dim is ", head_dim, "; allowed: a multiple of ",
                kHeadDimMultiple, " in [", kHeadDimMultiple, ", ", kMaxHeadDim, "]");
  }
  if (head_dim_v != 0 && !supported(head_dim_v)) {
    return fail(FLASH4_ERROR_UNSUPPORTED_HEAD_DIM, "head_dim_v is ", head_dim_v, "; allowed: 0 (equal to head_dim) ",
                "or a multiple of ", kHeadDimMultiple, " in [", kHeadDimMultiple, ", ", kMaxHeadDim, "]");
  }
  return {};
}

bool is_known_struct_size(const flash4_fwd_params& params) {
  return contains(kFwdStructSizes, params.struct_size);
}
bool is_known_struct_size(const flash4_bwd_params& params) {
  return contains(kBwdStructSizes, params.struct_size);
}

Check validate_fwd(const flash4_fwd_params& p) {
  if (Check c = check_struct_size(p.struct_size, kFwdStructSizes, "flash4_fwd_params"); !c.ok()) return c;
  const Problem problem = detail::problem_of(p);
  const std::int32_t d = p.head_dim, dv = problem.dim_v();
  const std::vector<Tensor> tensors = {{"q", p.q, p.q_strides, Side::query, false, d},
                                       {"k", p.k, p.k_strides, Side::key, false, d},
                                       {"v", p.v, p.v_strides, Side::key, false, dv},
                                       {"o", p.o, p.o_strides, Side::query, true, dv}};
  return validate(problem, tensors, detail::Lse{p.lse, false, true});
}

Check validate_bwd(const flash4_bwd_params& p) {
  if (Check c = check_struct_size(p.struct_size, kBwdStructSizes, "flash4_bwd_params"); !c.ok()) return c;
  if (p.deterministic != 0 && p.deterministic != 1) {
    return fail(FLASH4_ERROR_INVALID_ARGUMENT, "deterministic is ", p.deterministic, "; allowed: 0, 1");
  }
  const Problem problem = detail::problem_of(p);
  const std::int32_t d = p.head_dim, dv = problem.dim_v();
  const std::vector<Tensor> tensors = {{"q", p.q, p.q_strides, Side::query, false, d},
                                       {"k", p.k, p.k_strides, Side::key, false, d},
                                       {"v", p.v, p.v_strides, Side::key, false, dv},
                                       {"o", p.o, p.o_strides, Side::query, false, dv},
                                       {"dout", p.dout, p.dout_strides, Side::query, false, dv},
                                       {"dq", p.dq, p.dq_strides, Side::query, true, d},
                                       {"dk", p.dk, p.dk_strides, Side::key, true, d},
                                       {"dv", p.dv, p.dv_strides, Side::key, true, dv}};
  return validate(problem, tensors, detail::Lse{p.lse, true, false});
}

bool is_empty(const flash4_fwd_params& params) { return host::is_empty_problem(params); }
bool is_empty(const flash4_bwd_params& params) { return host::is_empty_problem(params); }

flash4_fwd_params canonicalize(const flash4_fwd_params& params) { return canonical(params); }
flash4_bwd_params canonicalize(const flash4_bwd_params& params) { return canonical(params); }

}  // namespace flash4::api
