// Special-function unit (MUFU) instructions and packed conversions used by the softmax.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace flash4::sm90 {

// 2^x on the MUFU unit (flushes subnormals; ex2(-inf) = 0).
__device__ __forceinline__ float ex2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ float tanh_approx(float x) {
  float y;
  asm("tanh.approx.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Two floats -> one 32-bit register of two 16-bit values; `lo` lands in the low half, which is the
// lower column index in wgmma fragments.
template <bool kIsBf16>
__device__ __forceinline__ uint32_t pack_pair(float lo, float hi) {
  if constexpr (kIsBf16) {
    const __nv_bfloat162 packed = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&packed);
  } else {
    const __half2 packed = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&packed);
  }
}

}  // namespace flash4::sm90
