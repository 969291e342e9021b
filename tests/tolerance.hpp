// The project's tolerance rule, in one place (DESIGN.md section 4). A kernel output passes when
//
//   max |kernel - fp64| <= 2 * max |naive - fp64| + floor
//
// where fp64 is the exact reference (flash4::ref::forward_fp64 / backward_fp64) and naive is the
// same-precision baseline (flash4::ref::forward_naive / backward_naive). The naive implementation makes
// the roundings any bf16/fp16 kernel must make (inputs, P, dS, outputs), so its error measures what the
// precision allows on this very problem. The factor 2 leaves room for a different but equally valid
// order of accumulation; the floor covers problems where the naive error happens to be near zero.
//
// Usage: EXPECT_TRUE(within_tolerance("O", compare(kernel_o, ref.o), compare(naive.o, ref.o), kBf16NoiseFloor));
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <span>
#include <sstream>

namespace flash4::test {

// Kernel error may be at most this many times the naive error.
inline constexpr double kNaiveErrorFactor = 2.0;

// Noise floors: one unit roundoff of the precision (bf16 2^-8, fp16 2^-11) at magnitude 1. O, LSE and
// the gradients of small problems with unit-normal inputs are O(1), and a kernel that accumulates in a
// different order can land one rounding away from the naive result even where the naive error is ~0.
// For outputs far from magnitude 1 (gradients of long sequences), scale the floor by max |fp64|.
inline constexpr double kBf16NoiseFloor = 0x1p-8;
inline constexpr double kFp16NoiseFloor = 0x1p-11;

struct ErrorStats {
  double max_abs = 0;   // largest |got - ref|
  double mean_abs = 0;  // mean |got - ref|, to tell one outlier from a general drift
};

// Element-wise |got - ref|. Equal values count as 0 error, which makes matching infinities (the -inf
// LSE of fully masked rows) agree; a NaN on either side counts as infinite error, so it always fails.
// A size mismatch also gives infinite error.
inline ErrorStats compare(std::span<const float> got, std::span<const double> ref) {
  constexpr double kInfinite = std::numeric_limits<double>::infinity();
  if (got.size() != ref.size()) return {kInfinite, kInfinite};
  ErrorStats stats;
  double sum = 0;
  for (std::size_t e = 0; e < got.size(); ++e) {
    const double g = got[e];
    const double r = ref[e];
    double error = 0;
    if (std::isnan(g) || std::isnan(r)) {
      error = kInfinite;
    } else if (g != r) {
      error = std::fabs(g - r);
    }
    stats.max_abs = std::max(stats.max_abs, error);
    sum += error;
  }
  stats.mean_abs = got.empty() ? 0 : sum / static_cast<double>(got.size());
  return stats;
}

// max |ref| (0 for an empty span): the magnitude a noise floor scales with for outputs far from 1.
inline double max_abs(std::span<const double> ref) {
  double largest = 0;
  for (double r : ref) largest = std::max(largest, std::fabs(r));
  return largest;
}

// The rule's bound on the kernel's max |error|.
inline double tolerance_bound(ErrorStats naive, double floor) { return kNaiveErrorFactor * naive.max_abs + floor; }

// Gradients are far from magnitude 1 (small at long sequences), so their noise floor is scaled by the largest
// exact value; gradients that cancel to exactly zero (a single visible key makes dS = P (dP - D) = 0) still
// carry the fp32 rounding of their order-1 terms, so the scale never goes below this magnitude.
inline constexpr double kMinGradientMagnitude = 0.1;
inline double gradient_floor(std::span<const double> exact, double floor) {
  return floor * std::max(max_abs(exact), kMinGradientMagnitude);
}

// The rule above as a GoogleTest assertion; the message shows every number that went into it.
inline ::testing::AssertionResult within_tolerance(const char* what, ErrorStats kernel, ErrorStats naive,
                                                   double floor) {
  const double bound = tolerance_bound(naive, floor);
  // An infinite kernel error (NaN output) fails even against an infinite bound.
  const bool pass = std::isfinite(kernel.max_abs) && kernel.max_abs <= bound;
  std::ostringstream message;
  message.precision(4);
  message << what << ": kernel max|err| " << kernel.max_abs << " (mean " << kernel.mean_abs << ") "
          << (pass ? "<=" : ">") << " bound " << bound << " = " << kNaiveErrorFactor << " * naive max|err| "
          << naive.max_abs << " (mean " << naive.mean_abs << ") + floor " << floor;
  return (pass ? ::testing::AssertionSuccess() : ::testing::AssertionFailure()) << message.str();
}

}  // namespace flash4::test
