// bf16 and fp16 emulated on the CPU. Kernels take 16-bit inputs and round P, dS and their outputs to
// 16 bits; the reference and the tests use these helpers to make such inputs and to model those
// roundings. Rounding is to nearest with ties to even, as the GPU's cvt.rn conversions do.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace flash4::ref {

enum class Precision { bf16, fp16 };

// Explicit mantissa bits of each format (bf16: 8-bit exponent like fp32; fp16: 5-bit exponent).
inline constexpr int kBf16MantissaBits = 7;
inline constexpr int kFp16MantissaBits = 10;

// Unit roundoff u = 2^-(mantissa bits + 1): the largest relative error of one rounding to nearest
// (bf16: 2^-8, fp16: 2^-11).
constexpr double unit_roundoff(Precision precision) {
  const int mantissa_bits = precision == Precision::bf16 ? kBf16MantissaBits : kFp16MantissaBits;
  return 1.0 / static_cast<double>(1u << (mantissa_bits + 1));
}

constexpr std::string_view name(Precision precision) {
  return precision == Precision::bf16 ? "bf16" : "fp16";
}

// x rounded to the nearest value of the 16-bit format, ties to even; overflow gives +-inf, NaN stays NaN.
float round_to(Precision precision, float x);

// The 16-bit pattern of round_to(precision, x). A NaN input gives a quiet NaN of the same sign.
std::uint16_t to_bits(Precision precision, float x);

// The value of a 16-bit pattern (exact: every bf16 and fp16 value is a float).
float from_bits(Precision precision, std::uint16_t bits);

// round_to applied to every element.
std::vector<float> round_all(Precision precision, std::span<const float> values);

}  // namespace flash4::ref
