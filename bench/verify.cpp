// Sampled-row verification. A full CPU reference at 16K tokens would take hours, so a few (batch, head) pairs
// and evenly spaced rows (first and last included: the causal extremes) are checked with forward_fp64_row.
#include "verify.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "reference/reference.hpp"

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

// |got - want|, where equal values (the -inf LSE of a fully masked row) agree and a NaN never does.
double error(double got, double want) {
  if (std::isnan(got) || std::isnan(want)) return std::numeric_limits<double>::infinity();
  return got == want ? 0.0 : std::fabs(got - want);
}

}  // namespace

Verification verify_forward(const Case& c, std::span<const float> q, std::span<const float> k,
                            std::span<const float> v, std::span<const std::uint16_t> o,
                            std::span<const float> lse) {
  ref::Problem problem;
  problem.batch = c.batch;
  problem.seqlen_q = c.seqlen_q;
  problem.seqlen_k = c.seqlen_k;
  problem.heads_q = c.heads_q;
  problem.heads_kv = c.heads_kv;
  problem.head_dim = c.head_dim;
  problem.scale = 1.0 / std::sqrt(static_cast<double>(c.head_dim));
  problem.causal = c.causal;

  const std::pair<int, int> pairs[] = {{0, 0}, {c.batch - 1, c.heads_q - 1}};
  const int rows = std::min(kSampledRows, c.seqlen_q);
  std::vector<double> o_ref(c.head_dim);
  double lse_ref = 0;
  Verification result;
  for (const auto& [b, h] : pairs) {
    for (int r = 0; r < rows; ++r) {
      const int row = rows == 1 ? 0 : static_cast<int>(static_cast<long long>(r) * (c.seqlen_q - 1) / (rows - 1));
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

}  // namespace flash4::bench
