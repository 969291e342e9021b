// Forward attention on the CPU: O = softmax(score(Q, K)) V per query row, and its log-sum-exp.
// One template serves the exact fp64 reference and the naive fp32 baseline; the baseline differs only
// in its arithmetic type and in the roundings it applies (inputs, P, O).
#include <algorithm>
#include <stdexcept>
#include <vector>

#include "reference/check_inputs.hpp"
#include "reference/reference.hpp"
#include "reference/row_softmax.hpp"

namespace flash4::ref {
namespace {

void check_forward_inputs(const Problem& p, std::span<const float> q, std::span<const float> k,
                          std::span<const float> v) {
  validate(p);
  detail::check_size(q, p.q_elements(), "q");
  detail::check_size(k, p.kv_elements(), "k");
  detail::check_size(v, p.v_elements(), "v");
}

// O and LSE of one query row. round_p models the rounding of P before the P @ V matmul.
template <typename Real, typename RoundP>
void forward_row(const Problem& p, std::span<const float> q, std::span<const float> k, std::span<const float> v,
                 int b, int h, int i, RoundP round_p, Real* o_row, Real* lse) {
  const detail::RowSoftmax<Real> row = detail::softmax_row<Real>(p, q, k, b, h, i);
  std::fill(o_row, o_row + p.dim_v(), Real(0));
  const int h_kv = p.kv_head(h);
  for (int j = 0; j < p.seq_k(b); ++j) {
    if (row.prob[j] == 0) continue;  // masked keys (and underflowed ones) contribute nothing
    const Real prob = round_p(row.prob[j]);
    const float* v_row = v.data() + p.v_index(b, j, h_kv);
    for (int d = 0; d < p.dim_v(); ++d) o_row[d] += prob * static_cast<Real>(v_row[d]);
  }
  *lse = row.lse;
}

template <typename Real, typename RoundP>
void forward_all_rows(const Problem& p, std::span<const float> q, std::span<const float> k,
                      std::span<const float> v, RoundP round_p, std::vector<Real>& o, std::vector<Real>& lse) {
  o.assign(p.o_elements(), Real(0));
  lse.assign(p.lse_elements(), Real(0));
  for (int b = 0; b < p.batch; ++b) {
    for (int h = 0; h < p.heads_q; ++h) {
      for (int i = 0; i < p.seq_q(b); ++i) {
        forward_row(p, q, k, v, b, h, i, round_p, o.data() + p.o_index(b, i, h), &lse[p.lse_index(b, h, i)]);
      }
    }
  }
}

}  // namespace

ForwardResult64 forward_fp64(const Problem& p, std::span<const float> q, std::span<const float> k,
                             std::span<const float> v) {
  check_forward_inputs(p, q, k, v);
  ForwardResult64 result;
  forward_all_rows<double>(p, q, k, v, detail::no_rounding, result.o, result.lse);
  return result;
}

void forward_fp64_row(const Problem& p, std::span<const float> q, std::span<const float> k,
                      std::span<const float> v, int batch, int head, int row, double* o_row, double* lse) {
  check_forward_inputs(p, q, k, v);
  if (batch < 0 || batch >= p.batch || head < 0 || head >= p.heads_q || row < 0 || row >= p.seq_q(batch)) {
    throw std::out_of_range("flash4::ref::forward_fp64_row: (batch, head, row) outside the problem");
  }
  forward_row<double>(p, q, k, v, batch, head, row, detail::no_rounding, o_row, lse);
}

ForwardResult32 forward_naive(const Problem& p, Precision precision, std::span<const float> q,
                              std::span<const float> k, std::span<const float> v) {
  check_forward_inputs(p, q, k, v);
  const auto round_p = [precision](float x) { return round_to(precision, x); };
  ForwardResult32 result;
  forward_all_rows<float>(p, round_all(precision, q), round_all(precision, k), round_all(precision, v), round_p,
                          result.o, result.lse);
  result.o = round_all(precision, result.o);
  return result;
}

}  // namespace flash4::ref
