// Bit-level float <-> bf16/fp16 conversion. Integer arithmetic on the float's bit pattern, so the result
// does not depend on the FPU rounding mode or on compiler support for 16-bit types.
#include "reference/precision.hpp"

#include <algorithm>
#include <bit>
#include <cmath>

namespace flash4::ref {
namespace {

// IEEE binary32 layout: 1 sign, 8 exponent (bias 127), 23 mantissa bits.
constexpr int kFloatMantissaBits = 23;
constexpr int kFloatExponentBias = 127;
constexpr std::uint32_t kFloatSignBit = 0x8000'0000u;
constexpr std::uint32_t kFloatMantissaMask = (1u << kFloatMantissaBits) - 1;
constexpr std::uint32_t kFloatImplicitBit = 1u << kFloatMantissaBits;
constexpr std::uint32_t kFloatInfBits = 0x7F80'0000u;  // also the largest non-NaN magnitude pattern

// bf16 is the upper half of a float: same sign and exponent, the mantissa cut to 7 bits.
constexpr int kBf16DroppedBits = kFloatMantissaBits - kBf16MantissaBits;  // 16
constexpr std::uint16_t kBf16QuietNan = 0x7FC0;

// IEEE binary16 layout: 1 sign, 5 exponent (bias 15), 10 mantissa bits.
constexpr int kFp16ExponentBias = 15;
constexpr int kFp16MinNormalExponent = 1 - kFp16ExponentBias;  // 2^-14
constexpr int kFp16DroppedBits = kFloatMantissaBits - kFp16MantissaBits;  // 13
constexpr std::uint16_t kFp16SignBit = 0x8000;
constexpr std::uint16_t kFp16ExponentField = 0x1F;  // all ones: inf or NaN
constexpr std::uint16_t kFp16MantissaMask = (1u << kFp16MantissaBits) - 1;
constexpr std::uint16_t kFp16InfBits = 0x7C00;
constexpr std::uint16_t kFp16QuietNan = 0x7E00;
// fp16 subnormals are multiples of 2^(min normal exponent - mantissa bits) = 2^-24.
constexpr int kFp16SubnormalUnitExponent = kFp16MinNormalExponent - kFp16MantissaBits;
// A float significand (< 2^24) shifted right by this much is below half a unit: it rounds to 0.
constexpr int kShiftToZero = kFloatMantissaBits + 2;

// value / 2^shift rounded to nearest, ties to even; 0 < shift < 32.
std::uint32_t shift_right_round_even(std::uint32_t value, int shift) {
  const std::uint32_t kept = value >> shift;
  const std::uint32_t dropped = value & ((1u << shift) - 1);
  const std::uint32_t half = 1u << (shift - 1);
  const bool round_up = dropped > half || (dropped == half && (kept & 1u) != 0);
  return kept + (round_up ? 1u : 0u);
}

std::uint16_t float_to_bf16_bits(float x) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(x);
  const auto sign = static_cast<std::uint16_t>((bits & kFloatSignBit) >> kBf16DroppedBits);
  // A NaN whose payload sits only in the dropped bits would truncate to inf: force a quiet NaN.
  if (std::isnan(x)) return sign | kBf16QuietNan;
  // A carry out of the mantissa moves into the exponent, which is the correct rounding up to the next
  // binade, and from the largest finite values up to the inf pattern.
  return sign | static_cast<std::uint16_t>(shift_right_round_even(bits & ~kFloatSignBit, kBf16DroppedBits));
}

std::uint16_t float_to_fp16_bits(float x) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(x);
  const auto sign = static_cast<std::uint16_t>((bits & kFloatSignBit) >> 16);
  const std::uint32_t magnitude = bits & ~kFloatSignBit;
  if (magnitude > kFloatInfBits) return sign | kFp16QuietNan;

  const int exponent = static_cast<int>(magnitude >> kFloatMantissaBits) - kFloatExponentBias;
  if (exponent >= kFp16MinNormalExponent) {
    // Normal range: move the exponent to the fp16 bias, then drop mantissa bits (a carry bumps the
    // exponent, as for bf16). Everything from 65520 (max 65504 plus half an ulp) up, inf included,
    // lands at or beyond the inf pattern and is clamped to it.
    constexpr std::uint32_t kRebias = static_cast<std::uint32_t>(kFloatExponentBias - kFp16ExponentBias)
                                      << kFloatMantissaBits;
    const std::uint32_t rounded = shift_right_round_even(magnitude - kRebias, kFp16DroppedBits);
    return sign | static_cast<std::uint16_t>(std::min<std::uint32_t>(rounded, kFp16InfBits));
  }
  // Subnormal range: count units of 2^-24. The float is significand * 2^(exponent - 23), i.e.
  // significand * 2^(exponent - 23 - kFp16SubnormalUnitExponent) units. A result of 2^10 units is the
  // smallest normal, whose bit pattern is exactly 2^10, so rounding up across the boundary needs no
  // special case. Float zeros and subnormals (no implicit bit) are far below 2^-25 and give 0.
  const std::uint32_t significand = (magnitude & kFloatMantissaMask) | kFloatImplicitBit;
  const int shift = std::min(kFloatMantissaBits + kFp16SubnormalUnitExponent - exponent, kShiftToZero);
  return sign | static_cast<std::uint16_t>(shift_right_round_even(significand, shift));
}

float bf16_bits_to_float(std::uint16_t bits) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << kBf16DroppedBits);
}

float fp16_bits_to_float(std::uint16_t bits) {
  const std::uint32_t sign = static_cast<std::uint32_t>(bits & kFp16SignBit) << 16;
  const int exponent_field = (bits >> kFp16MantissaBits) & kFp16ExponentField;
  const std::uint32_t mantissa = bits & kFp16MantissaMask;
  if (exponent_field == 0) {  // zero or subnormal: mantissa units of 2^-24, exact in float
    const float magnitude = std::ldexp(static_cast<float>(mantissa), kFp16SubnormalUnitExponent);
    return sign != 0 ? -magnitude : magnitude;
  }
  if (exponent_field == kFp16ExponentField) {  // inf, or NaN with its payload kept
    return std::bit_cast<float>(sign | kFloatInfBits | (mantissa << kFp16DroppedBits));
  }
  const auto exponent = static_cast<std::uint32_t>(exponent_field - kFp16ExponentBias + kFloatExponentBias);
  return std::bit_cast<float>(sign | (exponent << kFloatMantissaBits) | (mantissa << kFp16DroppedBits));
}

}  // namespace

std::uint16_t to_bits(Precision precision, float x) {
  return precision == Precision::bf16 ? float_to_bf16_bits(x) : float_to_fp16_bits(x);
}

float from_bits(Precision precision, std::uint16_t bits) {
  return precision == Precision::bf16 ? bf16_bits_to_float(bits) : fp16_bits_to_float(bits);
}

float round_to(Precision precision, float x) { return from_bits(precision, to_bits(precision, x)); }

std::vector<float> round_all(Precision precision, std::span<const float> values) {
  std::vector<float> out(values.size());
  std::transform(values.begin(), values.end(), out.begin(), [precision](float x) { return round_to(precision, x); });
  return out;
}

}  // namespace flash4::ref
