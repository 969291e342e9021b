// bf16/fp16 emulation (src/reference/precision.hpp), random inputs, and the tolerance helper
// (tests/tolerance.hpp): the numeric building blocks every other test relies on.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "reference/precision.hpp"
#include "reference/reference.hpp"
#include "tolerance.hpp"

namespace flash4::ref {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr std::uint16_t kSignBit16 = 0x8000;
constexpr std::uint32_t kPatterns16 = 1u << 16;

bool is_nan_pattern(Precision precision, std::uint16_t bits) { return std::isnan(from_bits(precision, bits)); }

class PrecisionTest : public ::testing::TestWithParam<Precision> {};

INSTANTIATE_TEST_SUITE_P(Formats, PrecisionTest, ::testing::Values(Precision::bf16, Precision::fp16),
                         [](const auto& instance) { return std::string(name(instance.param)); });

// 1 + u lies exactly halfway between 1 and the next value 1 + 2u: ties go to the even mantissa.
TEST_P(PrecisionTest, TiesRoundToEven) {
  const float u = static_cast<float>(unit_roundoff(GetParam()));
  EXPECT_EQ(round_to(GetParam(), 1 + u), 1.0f);          // 1 (even) vs 1 + 2u (odd)
  EXPECT_EQ(round_to(GetParam(), 1 + 3 * u), 1 + 4 * u);  // 1 + 2u (odd) vs 1 + 4u (even)
  EXPECT_EQ(round_to(GetParam(), -(1 + u)), -1.0f);
  EXPECT_EQ(round_to(GetParam(), -(1 + 3 * u)), -(1 + 4 * u));
  // Just off the tie, the nearer neighbour wins.
  EXPECT_EQ(round_to(GetParam(), std::nextafter(1 + u, 2.0f)), 1 + 2 * u);
  EXPECT_EQ(round_to(GetParam(), std::nextafter(1 + 3 * u, 0.0f)), 1 + 2 * u);
}

// Exhaustive: between every two neighbouring finite values lo < hi of the format, a float just below the
// midpoint rounds to lo, just above to hi, and the midpoint itself to the one with the even pattern.
// The midpoint is exact in float (it needs one bit more than the 16-bit format has).
TEST_P(PrecisionTest, RoundsToNearestBetweenEveryPairOfNeighbours) {
  const Precision precision = GetParam();
  for (std::uint16_t lo_bits = 0; lo_bits < kSignBit16; ++lo_bits) {
    const auto hi_bits = static_cast<std::uint16_t>(lo_bits + 1);
    const float lo = from_bits(precision, lo_bits);
    const float hi = from_bits(precision, hi_bits);
    if (std::isinf(hi) || std::isnan(hi) || std::isinf(lo) || std::isnan(lo)) continue;
    const float mid = lo + (hi - lo) / 2;
    const std::uint16_t even_bits = (lo_bits % 2 == 0) ? lo_bits : hi_bits;
    ASSERT_EQ(to_bits(precision, std::nextafter(mid, 0.0f)), lo_bits) << "below midpoint of " << lo;
    ASSERT_EQ(to_bits(precision, std::nextafter(mid, kInf)), hi_bits) << "above midpoint of " << lo;
    ASSERT_EQ(to_bits(precision, mid), even_bits) << "midpoint of " << lo;
    ASSERT_EQ(to_bits(precision, -mid), even_bits | kSignBit16) << "negative midpoint of " << lo;
  }
}

TEST_P(PrecisionTest, EveryNonNanPatternRoundTrips) {
  const Precision precision = GetParam();
  for (std::uint32_t pattern = 0; pattern < kPatterns16; ++pattern) {
    const auto bits = static_cast<std::uint16_t>(pattern);
    const float value = from_bits(precision, bits);
    if (std::isnan(value)) {
      ASSERT_TRUE(is_nan_pattern(precision, to_bits(precision, value))) << "pattern " << pattern;
    } else {
      ASSERT_EQ(to_bits(precision, value), bits) << "pattern " << pattern;
      ASSERT_EQ(round_to(precision, value), value) << "pattern " << pattern;
    }
  }
}

TEST_P(PrecisionTest, SpecialValues) {
  const Precision precision = GetParam();
  EXPECT_EQ(from_bits(precision, to_bits(precision, kInf)), kInf);
  EXPECT_EQ(from_bits(precision, to_bits(precision, -kInf)), -kInf);
  EXPECT_EQ(to_bits(precision, 0.0f), 0u);
  EXPECT_EQ(to_bits(precision, -0.0f), kSignBit16);
  EXPECT_TRUE(std::signbit(round_to(precision, -0.0f)));
  EXPECT_TRUE(std::isnan(round_to(precision, std::numeric_limits<float>::quiet_NaN())));
  // A NaN whose payload lives only in the low mantissa bits must not truncate to inf.
  const float low_payload_nan = std::bit_cast<float>(0x7F80'0001u);
  ASSERT_TRUE(std::isnan(low_payload_nan));
  EXPECT_TRUE(std::isnan(round_to(precision, low_payload_nan)));
  EXPECT_TRUE(std::isnan(round_to(precision, -low_payload_nan)));
  // The largest float is far beyond both formats' largest finite value plus half an ulp.
  EXPECT_EQ(round_to(precision, std::numeric_limits<float>::max()), kInf);
  EXPECT_EQ(round_to(precision, std::numeric_limits<float>::lowest()), -kInf);
}

TEST(Bf16, OverflowAndSubnormals) {
  constexpr std::uint16_t kMaxFinite = 0x7F7F;  // (2 - 2^-7) * 2^127
  constexpr std::uint16_t kInfBits = 0x7F80;
  const float max_finite = from_bits(Precision::bf16, kMaxFinite);
  const float overflow_threshold = max_finite + std::ldexp(1.0f, 127 - 8);  // plus half an ulp
  EXPECT_EQ(to_bits(Precision::bf16, std::nextafter(overflow_threshold, 0.0f)), kMaxFinite);
  EXPECT_EQ(to_bits(Precision::bf16, overflow_threshold), kInfBits);  // tie: 0x7F7F is odd
  EXPECT_EQ(to_bits(Precision::bf16, kInf), kInfBits);
  // bf16 subnormals are float subnormals with 7 mantissa bits: the smallest is 2^-133.
  EXPECT_EQ(from_bits(Precision::bf16, 0x0001), std::ldexp(1.0f, -133));
  EXPECT_EQ(to_bits(Precision::bf16, std::ldexp(1.0f, -133)), 0x0001);
  EXPECT_EQ(to_bits(Precision::bf16, std::ldexp(1.0f, -134)), 0x0000);  // tie with 0: 0 is even
  EXPECT_EQ(to_bits(Precision::bf16, std::ldexp(3.0f, -134)), 0x0002);  // tie between 1 and 2
}

TEST(Fp16, OverflowAndSubnormals) {
  constexpr std::uint16_t kMaxFinite = 0x7BFF;  // 65504
  constexpr std::uint16_t kInfBits = 0x7C00;
  EXPECT_EQ(from_bits(Precision::fp16, kMaxFinite), 65504.0f);
  EXPECT_EQ(to_bits(Precision::fp16, 65519.0f), kMaxFinite);
  EXPECT_EQ(to_bits(Precision::fp16, 65520.0f), kInfBits);  // 65504 + half an ulp (16): tie, odd -> up
  EXPECT_EQ(to_bits(Precision::fp16, kInf), kInfBits);
  EXPECT_EQ(to_bits(Precision::fp16, -kInf), kInfBits | kSignBit16);
  // Subnormals are multiples of 2^-24 below 2^-14.
  EXPECT_EQ(from_bits(Precision::fp16, 0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(from_bits(Precision::fp16, 0x03FF), std::ldexp(1023.0f, -24));
  EXPECT_EQ(from_bits(Precision::fp16, 0x0400), std::ldexp(1.0f, -14));
  EXPECT_EQ(to_bits(Precision::fp16, std::ldexp(1.0f, -25)), 0x0000);  // tie with 0
  EXPECT_EQ(to_bits(Precision::fp16, std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
  EXPECT_EQ(to_bits(Precision::fp16, std::ldexp(3.0f, -25)), 0x0002);  // tie between 1 and 2
  EXPECT_EQ(to_bits(Precision::fp16, std::ldexp(2047.0f, -25)), 0x0400);  // rounds up into the normals
  EXPECT_EQ(to_bits(Precision::fp16, std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_EQ(to_bits(Precision::fp16, -std::ldexp(1.0f, -24)), 0x0001 | kSignBit16);
}

TEST_P(PrecisionTest, RandomTensorIsRoundedSeededAndUnitNormal) {
  constexpr std::size_t kCount = 20000;
  const Precision precision = GetParam();
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const std::vector<float> values = random_tensor(kCount, precision, seed);
  ASSERT_EQ(values.size(), kCount);
  EXPECT_EQ(values, random_tensor(kCount, precision, seed));
  EXPECT_NE(values, random_tensor(kCount, precision, seed + 1));
  double sum = 0;
  double sum_squares = 0;
  for (float x : values) {
    ASSERT_EQ(round_to(precision, x), x);
    sum += x;
    sum_squares += static_cast<double>(x) * x;
  }
  // Sample mean and variance of 20000 unit normals: standard errors 0.007 and 0.01; allow 5 of them.
  const double mean = sum / kCount;
  EXPECT_NEAR(mean, 0.0, 0.035);
  EXPECT_NEAR(sum_squares / kCount - mean * mean, 1.0, 0.05);
}

// --- tests/tolerance.hpp ---

using test::compare;
using test::ErrorStats;
using test::within_tolerance;

TEST(Tolerance, CompareReportsMaxAndMeanAbsoluteError) {
  const std::vector<float> got{1.0f, 2.5f, -3.0f, 0.0f};
  const std::vector<double> ref{1.0, 2.0, -2.0, 0.0};
  const ErrorStats stats = compare(got, ref);
  EXPECT_EQ(stats.max_abs, 1.0);
  EXPECT_EQ(stats.mean_abs, 1.5 / 4);
}

TEST(Tolerance, CompareTreatsMatchingInfinitiesAsEqual) {
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<float> got{-kInf, 1.0f};
  EXPECT_EQ(compare(got, std::vector<double>{-inf, 1.0}).max_abs, 0.0);
  EXPECT_EQ(compare(got, std::vector<double>{inf, 1.0}).max_abs, inf);
  EXPECT_EQ(compare(got, std::vector<double>{-1.0, 1.0}).max_abs, inf);
}

TEST(Tolerance, CompareTreatsNanAndSizeMismatchAsInfiniteError) {
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<float> nan_output{1.0f, std::numeric_limits<float>::quiet_NaN()};
  EXPECT_EQ(compare(nan_output, std::vector<double>{1.0, 1.0}).max_abs, inf);
  EXPECT_EQ(compare(std::vector<float>{1.0f}, std::vector<double>{1.0, 1.0}).max_abs, inf);
}

TEST(Tolerance, BoundIsTwiceTheNaiveErrorPlusTheFloor) {
  const ErrorStats naive{0.01, 0.001};
  const double floor = 0.005;  // bound = 2 * 0.01 + 0.005 = 0.025
  EXPECT_TRUE(within_tolerance("O", ErrorStats{0.025, 0.001}, naive, floor));
  const ::testing::AssertionResult fail = within_tolerance("O", ErrorStats{0.026, 0.002}, naive, floor);
  EXPECT_FALSE(fail);
  const std::string message = fail.message();
  for (const char* number : {"0.026", "0.002", "0.025", "0.01", "0.001", "0.005"}) {
    EXPECT_NE(message.find(number), std::string::npos) << "missing " << number << " in: " << message;
  }
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_FALSE(within_tolerance("O", ErrorStats{inf, inf}, ErrorStats{inf, inf}, floor));
}

}  // namespace
}  // namespace flash4::ref
