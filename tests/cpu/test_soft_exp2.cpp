// Accuracy of flash4::soft_exp2, the FMA-pipe exp2 that kernels use for a share of the softmax
// exponentials. What matters is the value after P is rounded to bf16/fp16 for the PV matmul, so the test
// compares soft_exp2 and exp2f after that rounding, in units in the last place of the 16-bit format.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>

#include "kernels/common/online_softmax.hpp"
#include "kernels/common/soft_exp2.hpp"
#include "reference/precision.hpp"

namespace {

using flash4::ref::Precision;

// Distance in units in the last place of `precision` between a and b once both are rounded to it. For
// non-negative values the 16-bit patterns are ordered like the values, so their difference counts
// the representable numbers in between, also across binades and into subnormals.
int ulp_distance(Precision precision, float a, float b) {
  return std::abs(static_cast<int>(flash4::ref::to_bits(precision, a)) -
                  static_cast<int>(flash4::ref::to_bits(precision, b)));
}

// The sweep grid: x = i * 2^-15. [-127, 0] holds 4.2M points, each exactly representable
// (127 * 2^15 < 2^24), and each step moves 2^x by far more than a float ulp, so monotonicity is tested
// on real steps rather than on rounding noise of the polynomial.
constexpr int kStepsPerUnit = 1 << 15;
constexpr int kMinIndex = -127 * kStepsPerUnit;  // x = -127, the clamp point

float grid_point(int i) { return static_cast<float>(i) / kStepsPerUnit; }

// On (-127, -126) soft_exp2 returns a too-small subnormal by design (see soft_exp2.hpp); accuracy
// claims about normal results are made above this bound.
constexpr float kNormalResultBound = -126.0f;

struct SweepStats {
  double within_one_ulp_share = 0;  // over the whole range
  double exact_share = 0;           // over the whole range
  int max_ulps_normal = 0;          // for x > kNormalResultBound
  double max_relative_error = 0;    // unrounded soft_exp2 vs exact 2^x, for x > kNormalResultBound
};

// Grid points first_index..last_index, both included.
SweepStats measure(Precision precision, int first_index, int last_index) {
  long within = 0;
  long exact = 0;
  SweepStats stats;
  for (int i = first_index; i <= last_index; ++i) {
    const float x = grid_point(i);
    const float soft = flash4::soft_exp2(x);
    const int ulps = ulp_distance(precision, soft, std::exp2(x));
    within += ulps <= 1;
    exact += ulps == 0;
    if (x > kNormalResultBound) {
      const double truth = std::exp2(static_cast<double>(x));
      stats.max_ulps_normal = std::max(stats.max_ulps_normal, ulps);
      stats.max_relative_error = std::max(stats.max_relative_error, std::fabs(soft - truth) / truth);
    }
  }
  const double points = last_index - first_index + 1;
  stats.within_one_ulp_share = static_cast<double>(within) / points;
  stats.exact_share = static_cast<double>(exact) / points;
  return stats;
}

void report(Precision precision, const SweepStats& stats) {
  const std::string name(flash4::ref::name(precision));
  ::testing::Test::RecordProperty(name + "_within_1ulp_share", std::to_string(stats.within_one_ulp_share));
  ::testing::Test::RecordProperty(name + "_exact_share", std::to_string(stats.exact_share));
  ::testing::Test::RecordProperty(name + "_max_rel_err_above_m126", std::to_string(stats.max_relative_error));
  std::printf("soft_exp2 vs exp2f in %s over [-127, 0]: within 1 ulp %.4f%%, exact %.4f%%; above -126: max %d ulp, "
              "max rel err %.3g\n",
              name.c_str(), 100 * stats.within_one_ulp_share, 100 * stats.exact_share, stats.max_ulps_normal,
              stats.max_relative_error);
}

// Measured on the sweep (design doc section 6): bf16 within 1 ulp 99.226%, exact 98.227% (every miss
// beyond 1 ulp is in (-127, -126)); unrounded max relative error 8.56e-5 above -126. fp16: within 1 ulp
// everywhere (results below 2^-25 round to 0 in both), exact 99.058%. Asserted with a little slack.
constexpr double kRequiredBf16WithinOneUlp = 0.99;  // the design's acceptance bar
constexpr double kMeasuredBf16WithinOneUlp = 0.992;
constexpr double kMeasuredBf16Exact = 0.982;
constexpr double kMeasuredMaxRelativeError = 8.8e-5;
constexpr double kMeasuredFp16Exact = 0.99;

TEST(SoftExp2, Bf16MatchesExp2fWithinOneUlp) {
  const SweepStats stats = measure(Precision::bf16, kMinIndex, 0);
  report(Precision::bf16, stats);
  EXPECT_GE(stats.within_one_ulp_share, kRequiredBf16WithinOneUlp);
  EXPECT_GE(stats.within_one_ulp_share, kMeasuredBf16WithinOneUlp);
  EXPECT_GE(stats.exact_share, kMeasuredBf16Exact);
  EXPECT_LE(stats.max_ulps_normal, 1);
  EXPECT_LE(stats.max_relative_error, kMeasuredMaxRelativeError);
}

TEST(SoftExp2, Fp16MatchesExp2fWithinOneUlp) {
  const SweepStats stats = measure(Precision::fp16, kMinIndex, 0);
  report(Precision::fp16, stats);
  EXPECT_EQ(stats.within_one_ulp_share, 1.0);
  EXPECT_GE(stats.exact_share, kMeasuredFp16Exact);
}

// With lazy rescaling the running max may be stale by up to the threshold, so kernels also call
// soft_exp2 on x in (0, threshold] (P up to 2^8). It must be as accurate there.
TEST(SoftExp2, AccurateUpToTheLazyRescaleThreshold) {
  const int last_index = static_cast<int>(flash4::kLazyRescaleThresholdLog2) * kStepsPerUnit;
  for (const Precision precision : {Precision::bf16, Precision::fp16}) {
    const SweepStats stats = measure(precision, 1, last_index);
    EXPECT_LE(stats.max_ulps_normal, 1) << flash4::ref::name(precision);
    EXPECT_LE(stats.max_relative_error, kMeasuredMaxRelativeError) << flash4::ref::name(precision);
  }
}

TEST(SoftExp2, SpecialInputs) {
  const float inf = std::numeric_limits<float>::infinity();
  // Masked scores arrive as -inf and must contribute exactly nothing to the row sum.
  EXPECT_EQ(flash4::soft_exp2(-inf), 0.0f);
  EXPECT_EQ(flash4::soft_exp2(-1e30f), 0.0f);
  EXPECT_EQ(flash4::soft_exp2(-127.0f), 0.0f);  // the clamp point lands on the bit pattern of +0
  // The row max itself gives exactly 1.
  EXPECT_EQ(flash4::soft_exp2(0.0f), 1.0f);
  EXPECT_EQ(flash4::soft_exp2(-0.0f), 1.0f);
  for (int k = 0; k <= 126; ++k) {
    const float x = -static_cast<float>(k);
    EXPECT_EQ(flash4::soft_exp2(x), std::ldexp(1.0f, -k)) << "x = " << x;
    // Neighbours of an integer take the other branch of floor(); both must stay accurate.
    for (const float near : {std::nextafter(x, -inf), std::nextafter(x, inf)}) {
      if (near <= kNormalResultBound) continue;
      EXPECT_LE(ulp_distance(Precision::bf16, flash4::soft_exp2(near), std::exp2(near)), 1) << "x = " << near;
      EXPECT_LE(ulp_distance(Precision::fp16, flash4::soft_exp2(near), std::exp2(near)), 1) << "x = " << near;
    }
  }
}

// Softmax probabilities must keep the order of the scores, or the kernel could rank keys differently
// from the math it claims to compute.
TEST(SoftExp2, MonotoneOverTheSweep) {
  float previous = flash4::soft_exp2(grid_point(kMinIndex));
  int violations = 0;
  constexpr int kMaxReported = 10;
  for (int i = kMinIndex + 1; i <= 0 && violations < kMaxReported; ++i) {
    const float current = flash4::soft_exp2(grid_point(i));
    if (current < previous) {
      ++violations;
      ADD_FAILURE() << "soft_exp2 decreases at x = " << grid_point(i);
    }
    previous = current;
  }
}

}  // namespace
