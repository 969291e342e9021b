// Explicit shared-memory loads. The compiler usually infers the shared space from a pointer into the
// dynamic shared buffer, but not always (the softcap backward's LSE / D reads came out as generic
// 64-bit loads, which compute-sanitizer's racecheck then could not order after the bulk copies that
// fill them); ld.shared states it.
#pragma once

#include <cstdint>

namespace flash4::sm90 {

__device__ __forceinline__ float2 load_shared_float2(const float* pointer) {
  float2 value;
  asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];\n"
               : "=f"(value.x), "=f"(value.y)
               : "r"(static_cast<uint32_t>(__cvta_generic_to_shared(pointer))));
  return value;
}

__device__ __forceinline__ float4 load_shared_float4(const float* pointer) {
  float4 value;
  asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];\n"
               : "=f"(value.x), "=f"(value.y), "=f"(value.z), "=f"(value.w)
               : "r"(static_cast<uint32_t>(__cvta_generic_to_shared(pointer))));
  return value;
}

__device__ __forceinline__ void store_shared_float4(float* pointer, float4 value) {
  asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"r"(static_cast<uint32_t>(__cvta_generic_to_shared(pointer))),
               "f"(value.x), "f"(value.y), "f"(value.z), "f"(value.w)
               : "memory");
}

}  // namespace flash4::sm90
