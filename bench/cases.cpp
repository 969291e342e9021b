// The case list of flash4-bench and the work each case does.
#include "cases.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace flash4::bench {
namespace {

// The anchors' shapes (DESIGN.md section 5): 16K tokens per batch and 2048 model width, whatever N and D.
constexpr int kAnchorTokens = 16384;
constexpr int kAnchorWidth = 2048;
constexpr int kAnchorHeadDims[] = {64, 128};
constexpr int kAnchorSeqlens[] = {512, 1024, 2048, 4096, 8192, 16384};
constexpr int kDefaultHeadDim = 128;
constexpr int kDefaultSeqlen = 4096;

// A case with the options' dtype, window and softcap.
Case make_case(const Options& o, Mode mode, int head_dim, bool causal, int batch, int seqlen_q, int seqlen_k,
               int heads_q, int heads_kv) {
  Case c{mode, o.dtype, head_dim, causal, batch, seqlen_q, seqlen_k, heads_q, heads_kv};
  c.window_left = o.window_left;
  c.window_right = o.window_right;
  c.softcap = o.softcap;
  c.deterministic = mode == Mode::bwd && o.deterministic;
  return c;
}

Case anchor_case(const Options& o, Mode mode, int head_dim, bool causal, int seqlen) {
  const int heads = std::max(1, kAnchorWidth / head_dim);
  return make_case(o, mode, head_dim, causal, kAnchorTokens / seqlen, seqlen, seqlen, heads, heads);
}

// The cases of one mode: the anchors' sweep for --all, else one from the flags.
std::vector<Case> cases_of_mode(const Options& o, Mode mode) {
  std::vector<Case> out;
  if (o.all) {
    std::vector<int> head_dims(std::begin(kAnchorHeadDims), std::end(kAnchorHeadDims));
    if (o.head_dim) head_dims = {*o.head_dim};  // --D outside {64, 128}: the same sweep at that head dim
    for (int head_dim : head_dims) {
      for (bool causal : {false, true}) {
        for (int seqlen : kAnchorSeqlens) out.push_back(anchor_case(o, mode, head_dim, causal, seqlen));
      }
    }
    return out;
  }
  const int head_dim = o.head_dim.value_or(kDefaultHeadDim);
  const int heads_q = o.heads_q.value_or(std::max(1, kAnchorWidth / head_dim));
  const int heads_kv = o.heads_kv.value_or(heads_q);
  if (!o.varlen_q.empty()) {
    const std::vector<int>& varlen_k = o.varlen_k.empty() ? o.varlen_q : o.varlen_k;
    Case c = make_case(o, mode, head_dim, o.causal, static_cast<int>(o.varlen_q.size()),
                       *std::max_element(o.varlen_q.begin(), o.varlen_q.end()),
                       *std::max_element(varlen_k.begin(), varlen_k.end()), heads_q, heads_kv);
    c.varlen_q = o.varlen_q;
    c.varlen_k = varlen_k;
    out.push_back(c);
    return out;
  }
  const int seqlen_q = o.seqlen_q.value_or(o.seqlen.value_or(kDefaultSeqlen));
  const int seqlen_k = o.seqlen_k.value_or(o.seqlen.value_or(kDefaultSeqlen));
  const int batch = o.batch.value_or(std::max(1, kAnchorTokens / seqlen_q));
  out.push_back(make_case(o, mode, head_dim, o.causal, batch, seqlen_q, seqlen_k, heads_q, heads_kv));
  return out;
}

// Offsets 0, l0, l0 + l1, ... of packed sequences.
std::vector<int> offsets(const std::vector<int>& lengths) {
  std::vector<int> out(lengths.size() + 1, 0);
  std::partial_sum(lengths.begin(), lengths.end(), out.begin() + 1);
  return out;
}

}  // namespace

std::size_t Case::rows_q() const {
  if (is_varlen()) return std::accumulate(varlen_q.begin(), varlen_q.end(), std::size_t{0});
  return static_cast<std::size_t>(batch) * seqlen_q;
}

std::size_t Case::rows_k() const {
  if (is_varlen()) return std::accumulate(varlen_k.begin(), varlen_k.end(), std::size_t{0});
  return static_cast<std::size_t>(batch) * seqlen_k;
}

std::vector<Case> cases(const Options& o) {
  std::vector<Case> out;
  for (Mode mode : o.modes) {
    for (const Case& c : cases_of_mode(o, mode)) out.push_back(c);
  }
  return out;
}

ref::Problem to_problem(const Case& c) {
  ref::Problem problem;
  problem.batch = c.batch;
  problem.seqlen_q = c.seqlen_q;
  problem.seqlen_k = c.seqlen_k;
  problem.heads_q = c.heads_q;
  problem.heads_kv = c.heads_kv;
  problem.head_dim = c.head_dim;
  problem.scale = 1.0 / std::sqrt(static_cast<double>(c.head_dim));
  problem.causal = c.causal;
  problem.window_left = c.window_left;
  problem.window_right = c.window_right;
  problem.softcap = c.softcap;
  if (c.is_varlen()) {
    problem.cu_seqlens_q = offsets(c.varlen_q);
    problem.cu_seqlens_k = offsets(c.varlen_k);
  }
  return problem;
}

double visible_pairs(int sq, int sk, bool causal, int window_left, int window_right) {
  const int right = causal ? 0 : window_right;  // causal makes the right edge 0 (the C ABI, as FlashAttention)
  double pairs = 0;
  for (int i = 0; i < sq; ++i) {
    const long long diagonal = static_cast<long long>(i) + sk - sq;  // the key aligned with query i
    const long long first = window_left < 0 ? 0 : std::max(0LL, diagonal - window_left);
    const long long last = right < 0 ? sk - 1 : std::min<long long>(sk - 1, diagonal + right);
    pairs += static_cast<double>(std::max(0LL, last - first + 1));
  }
  return pairs;
}

double flops(const Case& c) {
  constexpr double kMatmulFlopsPerEntry = 4;  // two matmuls (QK^T, PV), 2 flops per multiply-add
  constexpr double kCausalShare = 0.5;
  constexpr double kBackwardFactor = 2.5;
  const bool windowed = c.window_left >= 0 || c.window_right >= 0;
  const ref::Problem problem = to_problem(c);
  double pairs = 0;
  for (int b = 0; b < c.batch; ++b) {
    const int sq = problem.seq_q(b), sk = problem.seq_k(b);
    pairs += windowed ? visible_pairs(sq, sk, c.causal, c.window_left, c.window_right)
                      : static_cast<double>(sq) * sk * (c.causal ? kCausalShare : 1.0);
  }
  const double forward = kMatmulFlopsPerEntry * c.heads_q * c.head_dim * pairs;
  return c.mode == Mode::fwd ? forward : kBackwardFactor * forward;
}

double bytes_moved(const Case& c) {
  constexpr double kElementBytes = 2;
  constexpr double kLseBytes = 4;
  const double q_like = kElementBytes * static_cast<double>(c.rows_q()) * c.heads_q * c.head_dim;
  const double kv_like = kElementBytes * static_cast<double>(c.rows_k()) * c.heads_kv * c.head_dim;
  const double lse = kLseBytes * static_cast<double>(c.rows_q()) * c.heads_q;
  // Forward: q, o and k, v. Backward: q, o, dout, dq and k, v, dk, dv.
  return c.mode == Mode::fwd ? 2 * q_like + 2 * kv_like + lse : 4 * q_like + 4 * kv_like + lse;
}

}  // namespace flash4::bench
