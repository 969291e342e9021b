// Software exp2 on the FMA pipe (the FA4 trick): 2^x = 2^floor(x) * 2^frac(x), with 2^frac from a
// degree-3 polynomial and 2^floor added straight into the exponent bits. Kernels send a fixed share of
// their exponentials here so that the MUFU unit and the FMA pipe work in parallel.
//
// Domain: softmax arguments, x <= 8 (scores minus the possibly stale row max, in log2 units: lazy
// rescaling lets x reach the threshold, where the CPU test checks accuracy too). Inputs are clamped to
// kSoftExp2MinInput = -127, where the polynomial is exactly 1 and the exponent add lands on the bit
// pattern of +0: so -inf (masked scores) gives exactly 0 with no extra select. On (-127, -126) the result
// is a subnormal below 2^-126 rather than 2^x: irrelevant next to the row max's 1.0, and documented by
// the CPU test, which measures accuracy above -126.
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/common/host_device.hpp"

namespace flash4 {

// Least-squares fit of 2^f on [0, 1) with p(0) = 1 and weights that equalize the relative error:
// max relative error 8.6e-5, well under half a bf16 ulp (2^-9 = 2e-3) and under an fp16 ulp (2^-11).
inline constexpr float kSoftExp2C1 = 0.69511663f;
inline constexpr float kSoftExp2C2 = 0.22764567f;
inline constexpr float kSoftExp2C3 = 0.07706642f;
// Clamp point: adding -127 to the exponent field of p in [1, 2) (field 127) reaches field 0.
inline constexpr float kSoftExp2MinInput = -127.0f;

FLASH4_HD float soft_exp2(float x) {
  x = x < kSoftExp2MinInput ? kSoftExp2MinInput : x;  // inputs are finite or -inf; NaN is not handled
#if defined(__CUDA_ARCH__)
  // floor(x) through the 1.5 * 2^23 magic constant with round-down: the integer lands in the low
  // mantissa bits, so one FADD gives both the float floor and, by subtraction of bit patterns, the int.
  constexpr float kMagic = 12582912.0f;  // 1.5 * 2^23
  const float shifted = __fadd_rd(x, kMagic);
  const float whole = shifted - kMagic;
  const int whole_int = __float_as_int(shifted) - __float_as_int(kMagic);
  const float frac = x - whole;
  const float poly = fmaf(fmaf(fmaf(kSoftExp2C3, frac, kSoftExp2C2), frac, kSoftExp2C1), frac, 1.0f);
  const float result = __int_as_float(__float_as_int(poly) + (whole_int << 23));
#else
  const float whole = __builtin_floorf(x);
  const float frac = x - whole;
  const float poly = __builtin_fmaf(__builtin_fmaf(__builtin_fmaf(kSoftExp2C3, frac, kSoftExp2C2), frac, kSoftExp2C1), frac, 1.0f);
  std::int32_t bits;
  std::memcpy(&bits, &poly, sizeof bits);
  bits += static_cast<std::int32_t>(whole) * (1 << 23);
  float result;
  std::memcpy(&result, &bits, sizeof result);
#endif
  return result;
}

}  // namespace flash4
