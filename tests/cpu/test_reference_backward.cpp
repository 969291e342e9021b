// The CPU backward reference (src/reference): backward_fp64 against central finite differences of the
// forward, zero gradients where nothing is visible, and the naive backward against fp64.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "reference/reference.hpp"

namespace flash4::ref {
namespace {

std::string seed_trace(std::uint64_t seed) { return "seed " + std::to_string(seed); }

// Small problems: finite differences run two forwards per input element. Together they cover causal
// (Sq < Sk and Sq > Sk, the latter with fully masked rows), window, softcap, GQA, MQA and varlen with
// an empty query sequence and an empty key sequence, and v (with o, dout, dv) narrower and wider than q.
struct Config {
  const char* name;
  Problem problem;
};

constexpr int kHeadDim = 4;
constexpr double kScale = 0.5;

const std::vector<Config>& configs() {
  static const std::vector<Config> all{
      {"plain", {.seqlen_q = 5, .seqlen_k = 7, .heads_q = 2, .heads_kv = 2, .head_dim = kHeadDim, .scale = kScale}},
      {"causal_sq_lt_sk", {.seqlen_q = 4, .seqlen_k = 7, .heads_q = 2, .heads_kv = 2, .head_dim = kHeadDim,
                           .scale = kScale, .causal = true}},
      {"causal_sq_gt_sk", {.batch = 2, .seqlen_q = 6, .seqlen_k = 3, .heads_q = 1, .heads_kv = 1,
                           .head_dim = kHeadDim, .scale = kScale, .causal = true}},
      {"window", {.seqlen_q = 7, .seqlen_k = 7, .heads_q = 2, .heads_kv = 2, .head_dim = kHeadDim, .scale = kScale,
                  .window_left = 2, .window_right = 1}},
      {"softcap", {.seqlen_q = 5, .seqlen_k = 6, .heads_q = 2, .heads_kv = 2, .head_dim = kHeadDim, .scale = 1.0,
                   .softcap = 1.5}},
      {"gqa", {.seqlen_q = 5, .seqlen_k = 6, .heads_q = 4, .heads_kv = 2, .head_dim = kHeadDim, .scale = kScale}},
      {"mqa_causal_softcap", {.seqlen_q = 4, .seqlen_k = 5, .heads_q = 3, .heads_kv = 1, .head_dim = kHeadDim,
                              .scale = 1.0, .causal = true, .softcap = 2.0}},
      {"varlen_window", {.batch = 4, .heads_q = 2, .heads_kv = 1, .head_dim = kHeadDim, .scale = kScale,
                         .window_left = 1, .window_right = 2, .cu_seqlens_q = {0, 3, 3, 7, 9},
                         .cu_seqlens_k = {0, 4, 6, 6, 11}}},
      {"narrow_v_causal", {.seqlen_q = 5, .seqlen_k = 6, .heads_q = 2, .heads_kv = 1, .head_dim = kHeadDim,
                           .head_dim_v = kHeadDim / 2, .scale = kScale, .causal = true}},
      {"wide_v_varlen", {.batch = 2, .heads_q = 2, .heads_kv = 2, .head_dim = kHeadDim, .head_dim_v = kHeadDim + 2,
                         .scale = kScale, .cu_seqlens_q = {0, 3, 7}, .cu_seqlens_k = {0, 5, 9}}},
      // Sinks: with Sq > Sk causal (fully masked rows, whose LSE is the sink) and GQA; and with softcap.
      {"sink_causal_gqa", {.batch = 2, .seqlen_q = 6, .seqlen_k = 4, .heads_q = 4, .heads_kv = 2,
                           .head_dim = kHeadDim, .scale = kScale, .causal = true, .sink = {0.5f, -1.0f, 2.0f, 0.0f}}},
      {"sink_softcap", {.seqlen_q = 5, .seqlen_k = 6, .heads_q = 2, .heads_kv = 1, .head_dim = kHeadDim, .scale = 1.0,
                        .softcap = 1.5, .sink = {1.25f, -0.5f}}},
      // seqused: unused rows of q and k (fixed length and varlen, 0 and full spans included), with a sink.
      {"seqused_fixed_causal", {.batch = 3, .seqlen_q = 5, .seqlen_k = 6, .heads_q = 2, .heads_kv = 1,
                                .head_dim = kHeadDim, .scale = kScale, .causal = true, .seqused_q = {3, 0, 5},
                                .seqused_k = {4, 2, 6}}},
      {"seqused_varlen_sink", {.batch = 3, .heads_q = 2, .heads_kv = 2, .head_dim = kHeadDim, .scale = kScale,
                               .cu_seqlens_q = {0, 4, 6, 9}, .cu_seqlens_k = {0, 5, 5, 9}, .seqused_q = {2, 2, 3},
                               .seqused_k = {3, 0, 4}, .sink = {0.75f, -0.25f}}},
  };
  return all;
}

// The loss whose gradients backward computes: sum(O * dout), in fp64.
double loss(const Problem& p, const Inputs& in) {
  const ForwardResult64 forward = forward_fp64(p, in.q, in.k, in.v);
  double sum = 0;
  for (std::size_t e = 0; e < forward.o.size(); ++e) sum += forward.o[e] * in.dout[e];
  return sum;
}

// Central difference step, about 1e-3 as a power of two. The truncation error is step^2 / 6 * |loss'''|,
// about 2e-7 * |loss'''|, and fp64 rounding adds only ~1e-16 * |loss| / step ~ 1e-12: measured
// differences stay below 2e-6 * (1 + |gradient|) on these configurations, so 2e-5 leaves a 10x margin,
// while a wrong gradient formula is off by O(0.01) or more.
constexpr float kStep = 0x1p-10f;
constexpr double kFiniteDifferenceTolerance = 2e-5;

// Checks every element of analytic (the gradient of tensor `member` of `in`) against a central
// difference. The step actually taken is measured from the perturbed float values, so rounding of
// x +- kStep to float does not bias the quotient.
void expect_matches_finite_differences(const char* name, const Problem& p, Inputs& in,
                                       std::vector<float> Inputs::*member, const std::vector<double>& analytic) {
  std::vector<float>& tensor = in.*member;
  ASSERT_EQ(analytic.size(), tensor.size()) << name;
  for (std::size_t e = 0; e < tensor.size(); ++e) {
    const float x = tensor[e];
    const float plus = x + kStep;
    const float minus = x - kStep;
    tensor[e] = plus;
    const double loss_plus = loss(p, in);
    tensor[e] = minus;
    const double loss_minus = loss(p, in);
    tensor[e] = x;
    const double numeric = (loss_plus - loss_minus) / (static_cast<double>(plus) - static_cast<double>(minus));
    ASSERT_NEAR(analytic[e], numeric, kFiniteDifferenceTolerance * (1 + std::fabs(numeric)))
        << name << " element " << e;
  }
}

class BackwardFp64 : public ::testing::TestWithParam<Config> {};

INSTANTIATE_TEST_SUITE_P(Configs, BackwardFp64, ::testing::ValuesIn(configs()),
                         [](const auto& instance) { return std::string(instance.param.name); });

TEST_P(BackwardFp64, MatchesFiniteDifferences) {
  const Problem& p = GetParam().problem;
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_trace(seed));
  Inputs in = random_inputs(p, Precision::bf16, seed);
  const BackwardResult64 grad = backward_fp64(p, in.q, in.k, in.v, in.dout);
  expect_matches_finite_differences("dq", p, in, &Inputs::q, grad.dq);
  expect_matches_finite_differences("dk", p, in, &Inputs::k, grad.dk);
  expect_matches_finite_differences("dv", p, in, &Inputs::v, grad.dv);
  ASSERT_EQ(grad.dsink.size(), p.sink.size());
  for (std::size_t h = 0; h < p.sink.size(); ++h) {
    Problem moved = p;
    const float plus = p.sink[h] + kStep;
    const float minus = p.sink[h] - kStep;
    moved.sink[h] = plus;
    const double loss_plus = loss(moved, in);
    moved.sink[h] = minus;
    const double loss_minus = loss(moved, in);
    const double numeric = (loss_plus - loss_minus) / (static_cast<double>(plus) - static_cast<double>(minus));
    EXPECT_NEAR(grad.dsink[h], numeric, kFiniteDifferenceTolerance * (1 + std::fabs(numeric))) << "dsink " << h;
  }
}

bool all_zero(const auto& values, std::size_t first, std::size_t count) {
  return std::all_of(values.begin() + static_cast<std::ptrdiff_t>(first),
                     values.begin() + static_cast<std::ptrdiff_t>(first + count), [](auto x) { return x == 0; });
}

// A query that sees no key gets dq = 0; a key that no query sees gets dk = dv = 0, in both the fp64 and
// the naive backward. Window (0, 0) with Sk - Sq = 2: query i sees key i + 2 only, so keys 0 and 1 are
// never seen. Causal with Sq - Sk = 2 masks queries 0 and 1. Varlen with an empty key sequence masks
// all its queries.
TEST(Backward, InvisibleRowsAndKeysGetZeroGradients) {
  struct Case {
    Problem problem;
    std::vector<int> masked_queries;  // of sequence 0, or of the last sequence for varlen
    std::vector<int> unseen_keys;     // of sequence 0
  };
  const std::vector<Case> cases{
      {{.seqlen_q = 3, .seqlen_k = 5, .heads_q = 2, .heads_kv = 1, .head_dim = kHeadDim, .window_left = 0,
        .window_right = 0},
       {},
       {0, 1}},
      {{.seqlen_q = 4, .seqlen_k = 2, .heads_q = 2, .heads_kv = 2, .head_dim = kHeadDim, .causal = true}, {0, 1}, {}},
      {{.batch = 2, .heads_q = 2, .heads_kv = 2, .head_dim = kHeadDim, .cu_seqlens_q = {0, 2, 5},
        .cu_seqlens_k = {0, 3, 3}},
       {0, 1, 2},
       {}},
  };
  for (const Case& c : cases) {
    const Problem& p = c.problem;
    SCOPED_TRACE(to_string(p));
    const std::uint64_t seed = fresh_seed();
    SCOPED_TRACE(seed_trace(seed));
    const Inputs in = random_inputs(p, Precision::bf16, seed);
    const BackwardResult64 exact = backward_fp64(p, in.q, in.k, in.v, in.dout);
    const BackwardResult32 naive = backward_naive(p, Precision::bf16, in.q, in.k, in.v, in.dout);
    const int b = p.batch - 1;
    const auto head_dim = static_cast<std::size_t>(p.head_dim);
    for (int i : c.masked_queries) {
      for (int h = 0; h < p.heads_q; ++h) {
        EXPECT_TRUE(all_zero(exact.dq, p.q_index(b, i, h), head_dim)) << "query " << i << " head " << h;
        EXPECT_TRUE(all_zero(naive.dq, p.q_index(b, i, h), head_dim)) << "query " << i << " head " << h;
      }
    }
    for (int j : c.unseen_keys) {
      for (int h_kv = 0; h_kv < p.heads_kv; ++h_kv) {
        const std::size_t first = p.kv_index(0, j, h_kv);
        EXPECT_TRUE(all_zero(exact.dk, first, head_dim) && all_zero(exact.dv, first, head_dim)) << "key " << j;
        EXPECT_TRUE(all_zero(naive.dk, first, head_dim) && all_zero(naive.dv, first, head_dim)) << "key " << j;
      }
    }
  }
}

class NaiveBackward : public ::testing::TestWithParam<std::tuple<Precision, Config>> {};

INSTANTIATE_TEST_SUITE_P(Configs, NaiveBackward,
                         ::testing::Combine(::testing::Values(Precision::bf16, Precision::fp16),
                                            ::testing::ValuesIn(configs())),
                         [](const auto& instance) {
                           const Precision precision = std::get<0>(instance.param);
                           return std::string(name(precision)) + "_" + std::get<1>(instance.param).name;
                         });

// ||got - ref||_2 / ||ref||_2 (the plain error norm when ref is all zero).
double relative_norm_error(const std::vector<float>& got, const std::vector<double>& ref) {
  double error_squares = 0;
  double ref_squares = 0;
  for (std::size_t e = 0; e < ref.size(); ++e) {
    const double error = got[e] - ref[e];
    error_squares += error * error;
    ref_squares += ref[e] * ref[e];
  }
  return ref_squares == 0 ? std::sqrt(error_squares) : std::sqrt(error_squares / ref_squares);
}

// Each naive gradient element carries a few roundings of relative size u (P or dS before its matmul,
// the gradient itself at the end) with varying signs, so the error stays near u in norm; but D comes
// from the rounded O (as the kernels take it from their stored output), and where dP - D cancels, dS
// carries O's rounding magnified. Measured: at most 25 u (bf16 15 u) over 72,000 gradients per precision
// (3,000 seeds of these configurations), 2 above 16 u. The norm is used rather than the max because sums
// with cancellation make single elements' relative errors unbounded. A formula mistake shows up as an
// O(1) relative error, still far above the bound.
constexpr double kNaiveBackwardUnitRoundoffs = 64.0;

TEST_P(NaiveBackward, CloseToFp64InNorm) {
  const auto& [precision, config] = GetParam();
  const Problem& p = config.problem;
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_trace(seed));
  const Inputs in = random_inputs(p, precision, seed);
  const BackwardResult64 exact = backward_fp64(p, in.q, in.k, in.v, in.dout);
  const BackwardResult32 naive = backward_naive(p, precision, in.q, in.k, in.v, in.dout);
  ASSERT_EQ(naive.dq.size(), exact.dq.size());
  ASSERT_EQ(naive.dk.size(), exact.dk.size());
  ASSERT_EQ(naive.dv.size(), exact.dv.size());
  const double bound = kNaiveBackwardUnitRoundoffs * unit_roundoff(precision);
  EXPECT_LE(relative_norm_error(naive.dq, exact.dq), bound) << "dq";
  EXPECT_LE(relative_norm_error(naive.dk, exact.dk), bound) << "dk";
  EXPECT_LE(relative_norm_error(naive.dv, exact.dv), bound) << "dv";
  ASSERT_EQ(naive.dsink.size(), exact.dsink.size());
  EXPECT_LE(relative_norm_error(naive.dsink, exact.dsink), bound) << "dsink";
}

// Given an O, the baseline takes delta from it: the naive forward's own O gives exactly the default's
// gradients (it is the O the default rounds itself); an O of zeros (delta = 0) moves dk by an O(1)
// fraction (against a rounding of 2^-8 or 2^-11: 0.045 was the smallest in 48,000 runs of these
// problems), while dv (P^T dout) does not depend on delta at all.
TEST_P(NaiveBackward, TakesDeltaFromAGivenO) {
  const auto& [precision, config] = GetParam();
  const Problem& p = config.problem;
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_trace(seed));
  const Inputs in = random_inputs(p, precision, seed);
  const BackwardResult64 exact = backward_fp64(p, in.q, in.k, in.v, in.dout);
  const ForwardResult32 forward = forward_naive(p, precision, in.q, in.k, in.v);
  const BackwardResult32 own = backward_naive(p, precision, in.q, in.k, in.v, in.dout, forward.o);
  const BackwardResult32 by_default = backward_naive(p, precision, in.q, in.k, in.v, in.dout);
  EXPECT_EQ(own.dq, by_default.dq);
  EXPECT_EQ(own.dk, by_default.dk);
  const std::vector<float> zeros(forward.o.size(), 0.0f);
  const BackwardResult32 zero_delta = backward_naive(p, precision, in.q, in.k, in.v, in.dout, zeros);
  constexpr double kDeltaEffect = 0.01;
  EXPECT_GT(relative_norm_error(zero_delta.dk, exact.dk), kDeltaEffect) << "dk";
  EXPECT_EQ(zero_delta.dv, own.dv);
}

// Rows of `from` (row_length values each) copied into rows of row_length + extra values, the extra ones 0.
std::vector<float> zero_padded(const std::vector<float>& from, int row_length, int extra) {
  std::vector<float> padded;
  for (std::size_t first = 0; first < from.size(); first += static_cast<std::size_t>(row_length)) {
    padded.insert(padded.end(), from.begin() + static_cast<std::ptrdiff_t>(first),
                  from.begin() + static_cast<std::ptrdiff_t>(first + static_cast<std::size_t>(row_length)));
    padded.insert(padded.end(), static_cast<std::size_t>(extra), 0.0f);
  }
  return padded;
}

// The first row_length values of each row of `from` (rows of row_length + extra values).
std::vector<double> truncated(const std::vector<double>& from, int row_length, int extra) {
  std::vector<double> rows;
  const std::size_t stride = static_cast<std::size_t>(row_length + extra);
  for (std::size_t first = 0; first < from.size(); first += stride) {
    rows.insert(rows.end(), from.begin() + static_cast<std::ptrdiff_t>(first),
                from.begin() + static_cast<std::ptrdiff_t>(first + static_cast<std::size_t>(row_length)));
  }
  return rows;
}

// The identity a kernel of a larger head dim relies on to serve a smaller one (docs/design.md): columns of
// zeros appended to q and k leave every score, and to v every other column of O, unchanged; their
// gradients are the unpadded ones plus zero columns. Here in fp64, where adding the zero products changes
// no sum, so the results must agree exactly: v narrower than q (head_dim_v < head_dim) against v padded to
// head_dim, and q, k narrower than v against q, k padded to head_dim_v.
TEST(Backward, ZeroColumnsChangeNothing) {
  const Problem narrow_v{.seqlen_q = 5, .seqlen_k = 7, .heads_q = 2, .heads_kv = 1, .head_dim = 6, .head_dim_v = 4,
                         .scale = kScale, .causal = true};
  const Problem narrow_qk{.batch = 2, .heads_q = 2, .heads_kv = 2, .head_dim = 2, .head_dim_v = 6, .scale = kScale,
                          .cu_seqlens_q = {0, 3, 7}, .cu_seqlens_k = {0, 5, 9}};
  for (const Problem& p : {narrow_v, narrow_qk}) {
    SCOPED_TRACE(to_string(p));
    const std::uint64_t seed = fresh_seed();
    SCOPED_TRACE(seed_trace(seed));
    const Inputs in = random_inputs(p, Precision::bf16, seed);
    const int width = std::max(p.head_dim, p.dim_v());
    const int extra_qk = width - p.head_dim;
    const int extra_v = width - p.dim_v();
    Problem square = p;
    square.head_dim = width;
    square.head_dim_v = 0;
    const Inputs padded{zero_padded(in.q, p.head_dim, extra_qk), zero_padded(in.k, p.head_dim, extra_qk),
                        zero_padded(in.v, p.dim_v(), extra_v), zero_padded(in.dout, p.dim_v(), extra_v)};
    const ForwardResult64 forward = forward_fp64(p, in.q, in.k, in.v);
    const ForwardResult64 forward_square = forward_fp64(square, padded.q, padded.k, padded.v);
    EXPECT_EQ(forward.o, truncated(forward_square.o, p.dim_v(), extra_v));
    EXPECT_EQ(forward.lse, forward_square.lse);
    const BackwardResult64 grad = backward_fp64(p, in.q, in.k, in.v, in.dout);
    const BackwardResult64 grad_square = backward_fp64(square, padded.q, padded.k, padded.v, padded.dout);
    EXPECT_EQ(grad.dq, truncated(grad_square.dq, p.head_dim, extra_qk));
    EXPECT_EQ(grad.dk, truncated(grad_square.dk, p.head_dim, extra_qk));
    EXPECT_EQ(grad.dv, truncated(grad_square.dv, p.dim_v(), extra_v));
  }
}

}  // namespace
}  // namespace flash4::ref
