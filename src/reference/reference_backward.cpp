// Backward attention on the CPU: gradients of the loss sum(O * dout) with respect to q, k and v.
// Per query row i (P the softmax row, dO = dout row):
//   dP_ij = dO_i . v_j,   delta_i = sum_j P_ij dP_ij (= dO_i . O_i),   dS_ij = P_ij (dP_ij - delta_i) s'_ij
//   dq_i += scale dS_ij k_j,   dk_j += scale dS_ij q_i,   dv_j += P_ij dO_i
// where s'_ij is the softcap derivative (1 when off). A sink is a column with a logit and no value: it takes
// the share exp(sink_h - LSE_i) of the row, so O_i shrinks by that share as the sink grows and
//   dsink_h = -sum_i exp(sink_h - LSE_i) delta_i,
// while the formulas above hold unchanged with P (and delta) taken from the LSE that includes the sink. As in the forward, one template serves the fp64
// reference and the naive fp32 baseline, which also rounds P and dS before the products that use them
// and takes delta from a rounded O: its own, or the forward output a kernel's backward was given.
#include <cmath>
#include <utility>
#include <vector>

#include "reference/check_inputs.hpp"
#include "reference/reference.hpp"
#include "reference/row_softmax.hpp"

namespace flash4::ref {
namespace {

void check_backward_inputs(const Problem& p, std::span<const float> q, std::span<const float> k,
                           std::span<const float> v, std::span<const float> dout) {
  validate(p);
  detail::check_size(q, p.q_elements(), "q");
  detail::check_size(k, p.kv_elements(), "k");
  detail::check_size(v, p.v_elements(), "v");
  detail::check_size(dout, p.o_elements(), "dout");
}

template <typename Real>
struct Gradients {
  std::vector<Real> dq, dk, dv, dsink;
};

// round_operand models the rounding of P and dS to the input precision before they enter a matmul.
// given_o, when not empty, is the O that delta is taken from (laid out as dout).
template <typename Real, typename RoundOperand>
Gradients<Real> backward_all_rows(const Problem& p, std::span<const float> q, std::span<const float> k,
                                  std::span<const float> v, std::span<const float> dout,
                                  RoundOperand round_operand, std::span<const float> given_o = {}) {
  Gradients<Real> grad{std::vector<Real>(p.q_elements(), Real(0)), std::vector<Real>(p.kv_elements(), Real(0)),
                       std::vector<Real>(p.v_elements(), Real(0)),
                       std::vector<Real>(p.has_sink() ? p.heads_q : 0, Real(0))};
  for (int b = 0; b < p.batch; ++b) {
    const int sk = p.seq_k(b);
    for (int h = 0; h < p.heads_q; ++h) {
      const int h_kv = p.kv_head(h);
      for (int i = 0; i < p.seq_q(b); ++i) {
        const detail::RowSoftmax<Real> row = detail::softmax_row<Real>(p, q, k, b, h, i);
        const float* q_row = q.data() + p.q_index(b, i, h);
        const float* dout_row = dout.data() + p.o_index(b, i, h);
        Real* dq_row = grad.dq.data() + p.q_index(b, i, h);

        // delta = dO_i . O_i with O_i as the forward stores it: the naive baseline rounds P before P V and
        // O at the end (as forward_naive, and as a kernel's preprocess reads its forward's output). Where
        // dS cancels (rows that see one or two keys) that rounding is most of dS's error, and a baseline
        // computing delta from its own P and dP would not show it.
        std::vector<Real> dp(sk, Real(0));
        const int dim_v = p.dim_v();
        std::vector<Real> o_row(dim_v, Real(0));
        for (int j = 0; j < sk; ++j) {
          if (row.prob[j] == 0) continue;  // masked keys (and underflowed ones) get and give no gradient
          const float* v_row = v.data() + p.v_index(b, j, h_kv);
          dp[j] = detail::dot<Real>(dout_row, v_row, dim_v);
          const Real prob = round_operand(row.prob[j]);
          for (int d = 0; d < dim_v; ++d) o_row[d] += prob * static_cast<Real>(v_row[d]);
        }
        Real delta = 0;
        if (given_o.empty()) {
          for (int d = 0; d < dim_v; ++d) delta += static_cast<Real>(dout_row[d]) * round_operand(o_row[d]);
        } else {
          const float* given_row = given_o.data() + p.o_index(b, i, h);
          for (int d = 0; d < dim_v; ++d) {
            delta += static_cast<Real>(dout_row[d]) * static_cast<Real>(given_row[d]);
          }
        }
        if (p.has_sink()) grad.dsink[h] -= std::exp(static_cast<Real>(p.sink[h]) - row.lse) * delta;
        for (int j = 0; j < sk; ++j) {
          if (row.prob[j] == 0) continue;
          const Real ds =
              round_operand(row.prob[j] * (dp[j] - delta) * detail::score_derivative(p, row.score[j]));
          const Real prob = round_operand(row.prob[j]);
          const std::size_t kv = p.kv_index(b, j, h_kv);
          const float* k_row = k.data() + kv;
          Real* dk_row = grad.dk.data() + kv;
          Real* dv_row = grad.dv.data() + p.v_index(b, j, h_kv);
          for (int d = 0; d < p.head_dim; ++d) {
            dq_row[d] += ds * static_cast<Real>(k_row[d]);
            dk_row[d] += ds * static_cast<Real>(q_row[d]);
          }
          for (int d = 0; d < dim_v; ++d) dv_row[d] += prob * static_cast<Real>(dout_row[d]);
        }
      }
    }
  }
  // q.k enters the score multiplied by scale; applied once here rather than per term.
  const Real scale = static_cast<Real>(p.scale);
  for (Real& x : grad.dq) x *= scale;
  for (Real& x : grad.dk) x *= scale;
  return grad;
}

}  // namespace

BackwardResult64 backward_fp64(const Problem& p, std::span<const float> q, std::span<const float> k,
                               std::span<const float> v, std::span<const float> dout) {
  check_backward_inputs(p, q, k, v, dout);
  Gradients<double> grad = backward_all_rows<double>(p, q, k, v, dout, detail::no_rounding);
  return {std::move(grad.dq), std::move(grad.dk), std::move(grad.dv), std::move(grad.dsink)};
}

BackwardResult32 backward_naive(const Problem& p, Precision precision, std::span<const float> q,
                                std::span<const float> k, std::span<const float> v,
                                std::span<const float> dout, std::span<const float> o) {
  check_backward_inputs(p, q, k, v, dout);
  if (!o.empty()) detail::check_size(o, p.o_elements(), "o");
  const auto round = [precision](float x) { return round_to(precision, x); };
  Gradients<float> grad = backward_all_rows<float>(p, round_all(precision, q), round_all(precision, k),
                                                   round_all(precision, v), round_all(precision, dout), round,
                                                   round_all(precision, o));
  // dsink stays fp32, as the kernels write it.
  return {round_all(precision, grad.dq), round_all(precision, grad.dk), round_all(precision, grad.dv),
          std::move(grad.dsink)};
}

}  // namespace flash4::ref
