// The softmax of one query row over the keys of its sequence, in an arithmetic type Real: double for the
// exact reference, float for the naive baseline. Forward and backward both build on it, so mask, scale
// and softcap are applied the same way everywhere (internal to src/reference).
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <span>
#include <vector>

#include "reference/reference.hpp"

namespace flash4::ref::detail {

// The rounding policy of the fp64 reference: none.
inline double no_rounding(double x) { return x; }

template <typename Real>
struct RowSoftmax {
  std::vector<Real> score;  // per key of the sequence: scaled (and capped) q.k; -inf where masked
  std::vector<Real> prob;   // per key: softmax probability; 0 where masked
  Real lse;                 // natural log of sum(exp(score)) (+ exp(sink)); -inf when no key is visible and no sink
};

// a . b over n elements, accumulated in Real.
template <typename Real>
Real dot(const float* a, const float* b, int n) {
  Real sum = 0;
  for (int d = 0; d < n; ++d) sum += static_cast<Real>(a[d]) * static_cast<Real>(b[d]);
  return sum;
}

// scale * q.k, passed through the softcap when it is on.
template <typename Real>
Real score(const Problem& p, const float* q_row, const float* k_row) {
  const Real scaled = static_cast<Real>(p.scale) * dot<Real>(q_row, k_row, p.head_dim);
  if (p.softcap == 0) return scaled;
  const Real cap = static_cast<Real>(p.softcap);
  return cap * std::tanh(scaled / cap);
}

// d score / d (scale * q.k): 1 for no softcap, else 1 - tanh^2, with tanh recovered from the score.
template <typename Real>
Real score_derivative(const Problem& p, Real score) {
  if (p.softcap == 0) return 1;
  const Real t = score / static_cast<Real>(p.softcap);
  return 1 - t * t;
}

// Query row i, head h, of sequence b.
template <typename Real>
RowSoftmax<Real> softmax_row(const Problem& p, std::span<const float> q, std::span<const float> k, int b,
                             int h, int i) {
  constexpr Real kMinusInf = -std::numeric_limits<Real>::infinity();
  const int sq = p.seq_q(b);
  const int sk = p.seq_k(b);
  RowSoftmax<Real> row{std::vector<Real>(sk, kMinusInf), std::vector<Real>(sk, 0), kMinusInf};

  const float* q_row = q.data() + p.q_index(b, i, h);
  const int h_kv = p.kv_head(h);
  bool any_visible = false;
  Real max_score = kMinusInf;
  for (int j = 0; j < sk; ++j) {
    if (!key_visible(p, sq, sk, i, j)) continue;
    row.score[j] = score<Real>(p, q_row, k.data() + p.kv_index(b, j, h_kv));
    max_score = std::max(max_score, row.score[j]);
    any_visible = true;
  }
  // The sink is one more column of the row (no value behind it): it joins the max and the sum.
  const Real sink = p.has_sink() ? static_cast<Real>(p.sink[h]) : kMinusInf;
  if (!any_visible && sink == kMinusInf) return row;
  max_score = std::max(max_score, sink);

  // Subtracting the max keeps exp() in range; it cancels in the normalization.
  Real sum = sink == kMinusInf ? Real(0) : std::exp(sink - max_score);
  for (int j = 0; j < sk; ++j) {
    row.prob[j] = std::exp(row.score[j] - max_score);  // exp(-inf) = 0 for masked keys
    sum += row.prob[j];
  }
  for (Real& prob : row.prob) prob /= sum;
  row.lse = max_score + std::log(sum);
  return row;
}

}  // namespace flash4::ref::detail
