// Sampled-row verification. A full CPU reference at 16K tokens would take hours, so a few (batch, head) pairs
// and evenly spaced rows (first and last included: the causal extremes) are checked: the forward's with
// forward_fp64_row, the backward's with the fp64 gradient formulas of src/reference/reference_backward.cpp
// evaluated for the sampled rows only.
#include "verify.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "reference/reference.hpp"
#include "reference/row_softmax.hpp"

namespace flash4::bench {
namespace {

constexpr int kSampledRows = 64;

// The tolerance rule (tests/tolerance.hpp) compares with the naive same-precision error on the same problem,
// which needs a full CPU forward: too slow at these sizes. These fixed bounds are of that rule's kind. On
// unit-normal inputs the naive bf16 error (the CPU demo prints it) is ~2e-3 without a mask and up to ~8e-3
// causal, where the first rows average a few values of V (|O| up to ~4) and one bf16 rounding of P or O costs
// up to 2^-7 there: twice 8e-3 plus the 2^-8 noise floor is the 2e-2 below. fp16 has three more mantissa bits,
// so an 8x tighter bound.
constexpr double kMaxErrOBf16 = 2e-2;
constexpr double kMaxErrOFp16 = kMaxErrOBf16 / 8;
// LSE stays fp32 in the kernel: only the accumulation order differs from fp64. Relative to max(1, |LSE|) so
// that an LSE near 0 is not held to a relative bound.
constexpr double kMaxErrLse = 1e-3;
// Gradients, relative to the largest exact value among the sampled rows of each: every entry sums Sk (dq) or
// Sq (dk, dv) products whose dS or P factor the kernel rounds once to the input precision, accumulated in fp32,
// so a normwise error of a few unit roundoffs (bf16 2^-8 = 3.9e-3) is what the precision allows; 3e-2 is about
// eight of them. fp16 again 8x tighter.
constexpr double kMaxErrGradBf16 = 3e-2;
constexpr double kMaxErrGradFp16 = kMaxErrGradBf16 / 8;

// |got - want|, where equal values (the -inf LSE of a fully masked row) agree and a NaN never does.
double error(double got, double want) {
  if (std::isnan(got) || std::isnan(want)) return std::numeric_limits<double>::infinity();
  return got == want ? 0.0 : std::fabs(got - want);
}

// The (sequence, query head) pairs whose rows are checked: the first and the last.
std::vector<std::pair<int, int>> sampled_heads(const Case& c) { return {{0, 0}, {c.batch - 1, c.heads_q - 1}}; }

// Row r of `rows` evenly spaced rows out of `length`, the first and the last included.
int sampled_row(int r, int rows, int length) {
  return rows == 1 ? 0 : static_cast<int>(static_cast<long long>(r) * (length - 1) / (rows - 1));
}

// The largest error of one gradient relative to its largest exact value.
struct GradientError {
  double max_abs = 0;
  double max_exact = 0;

  void add(double got, double want) {
    max_abs = std::max(max_abs, error(got, want));
    max_exact = std::max(max_exact, std::fabs(want));
  }
  // An all-zero exact gradient (nothing visible) leaves the absolute error.
  double relative() const { return max_exact > 0 ? max_abs / max_exact : max_abs; }
};

}  // namespace

Verification verify_forward(const Case& c, std::span<const float> q, std::span<const float> k,
                            std::span<const float> v, std::span<const std::uint16_t> o,
                            std::span<const float> lse) {
  const ref::Problem problem = to_problem(c);
  std::vector<double> o_ref(c.head_dim);
  double lse_ref = 0;
  Verification result;
  for (const auto& [b, h] : sampled_heads(c)) {
    const int rows = std::min(kSampledRows, problem.seq_q(b));
    for (int r = 0; r < rows; ++r) {
      const int row = sampled_row(r, rows, problem.seq_q(b));
      ref::forward_fp64_row(problem, q, k, v, b, h, row, o_ref.data(), &lse_ref);
      const std::size_t first = problem.q_index(b, row, h);
      for (int d = 0; d < c.head_dim; ++d) {
        result.max_err_o = std::max(result.max_err_o, error(ref::from_bits(c.dtype, o[first + d]), o_ref[d]));
      }
      // A fully masked row has LSE = -inf: no relative scale, and a finite answer there is an infinite error.
      const double lse_scale = std::isfinite(lse_ref) ? std::max(1.0, std::fabs(lse_ref)) : 1.0;
      result.max_err_lse =
          std::max(result.max_err_lse, error(lse[problem.lse_index(b, h, row)], lse_ref) / lse_scale);
    }
  }
  const double max_err_o = c.dtype == ref::Precision::bf16 ? kMaxErrOBf16 : kMaxErrOFp16;
  result.ok = result.max_err_o <= max_err_o && result.max_err_lse <= kMaxErrLse;
  return result;
}

// Per (query row i of head h, key j): score s = scale q.k (through the softcap when on), P = exp(s - lse_i),
// dP = dout_i . v_j, dS = P (dP - delta_i) s', with delta_i = dout_i . o_i and s' the softcap's derivative (1
// when off); then dq_i = scale sum_j dS k_j, dk_j = scale sum_(h in group, i) dS q_i and
// dv_j = sum_(h in group, i) P dout_i.
Verification verify_backward(const Case& c, const BackwardData& t) {
  const ref::Problem problem = to_problem(c);
  const int head_dim = c.head_dim;
  const int group = c.heads_q / c.heads_kv;
  const auto value = [&](std::span<const std::uint16_t> x, std::size_t e) {
    return static_cast<double>(ref::from_bits(c.dtype, x[e]));
  };
  GradientError dq, dk, dv;
  for (const auto& [b, h] : sampled_heads(c)) {
    const int sq = problem.seq_q(b), sk = problem.seq_k(b);
    const int h_kv = problem.kv_head(h);
    // delta of every query row of the group's heads; group head g is query head h_kv * group + g.
    std::vector<double> delta(static_cast<std::size_t>(group) * sq);
    for (int g = 0; g < group; ++g) {
      for (int i = 0; i < sq; ++i) {
        const std::size_t first = problem.q_index(b, i, h_kv * group + g);
        double sum = 0;
        for (int d = 0; d < head_dim; ++d) sum += t.dout[first + d] * value(t.o, first + d);
        delta[static_cast<std::size_t>(g) * sq + i] = sum;
      }
    }
    // P and dS of query row i of group head g and key j; false where the key is masked.
    const auto terms = [&](int g, int i, int j, double& p, double& ds) {
      if (!ref::key_visible(problem, sq, sk, i, j)) return false;
      const int head = h_kv * group + g;
      const float* q_row = t.q.data() + problem.q_index(b, i, head);
      const std::size_t kv = problem.kv_index(b, j, h_kv);
      const double score = ref::detail::score<double>(problem, q_row, t.k.data() + kv);
      p = std::exp(score - t.lse[problem.lse_index(b, head, i)]);
      const double dp = ref::detail::dot<double>(t.dout.data() + problem.q_index(b, i, head), t.v.data() + kv, head_dim);
      ds = p * (dp - delta[static_cast<std::size_t>(g) * sq + i]) * ref::detail::score_derivative(problem, score);
      return true;
    };
    std::vector<double> acc_a(head_dim), acc_b(head_dim);
    const int rows_q = std::min(kSampledRows, sq);
    for (int r = 0; r < rows_q; ++r) {
      const int i = sampled_row(r, rows_q, sq);
      const int g = h - h_kv * group;
      std::fill(acc_a.begin(), acc_a.end(), 0.0);
      for (int j = 0; j < sk; ++j) {
        double p = 0, ds = 0;
        if (!terms(g, i, j, p, ds)) continue;
        const float* k_row = t.k.data() + problem.kv_index(b, j, h_kv);
        for (int d = 0; d < head_dim; ++d) acc_a[d] += ds * k_row[d];
      }
      const std::size_t first = problem.q_index(b, i, h);
      for (int d = 0; d < head_dim; ++d) dq.add(value(t.dq, first + d), problem.scale * acc_a[d]);
    }
    const int rows_k = std::min(kSampledRows, sk);
    for (int r = 0; r < rows_k; ++r) {
      const int j = sampled_row(r, rows_k, sk);
      std::fill(acc_a.begin(), acc_a.end(), 0.0);
      std::fill(acc_b.begin(), acc_b.end(), 0.0);
      for (int g = 0; g < group; ++g) {
        for (int i = 0; i < sq; ++i) {
          double p = 0, ds = 0;
          if (!terms(g, i, j, p, ds)) continue;
          const std::size_t row = problem.q_index(b, i, h_kv * group + g);
          for (int d = 0; d < head_dim; ++d) {
            acc_a[d] += ds * t.q[row + d];
            acc_b[d] += p * t.dout[row + d];
          }
        }
      }
      const std::size_t first = problem.kv_index(b, j, h_kv);
      for (int d = 0; d < head_dim; ++d) {
        dk.add(value(t.dk, first + d), problem.scale * acc_a[d]);
        dv.add(value(t.dv, first + d), acc_b[d]);
      }
    }
  }
  Verification result;
  result.max_err_dq = dq.relative();
  result.max_err_dk = dk.relative();
  result.max_err_dv = dv.relative();
  const double bound = c.dtype == ref::Precision::bf16 ? kMaxErrGradBf16 : kMaxErrGradFp16;
  result.ok = result.max_err_dq <= bound && result.max_err_dk <= bound && result.max_err_dv <= bound;
  return result;
}

}  // namespace flash4::bench
