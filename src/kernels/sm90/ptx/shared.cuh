// Explicit shared-memory loads and stores. The compiler usually infers the shared space from a pointer
// into the dynamic shared buffer, but not through the kernels' aligned base pointer (the softcap
// backward's LSE / D reads came out as generic 64-bit loads, which compute-sanitizer's racecheck then
// could not order after the bulk copies that fill them; the backward's dS and dQ staging stores as
// generic ST, slower than STS); ld.shared / st.shared state it. smem_address is the one conversion to
// the 32-bit shared address the other PTX wrappers take as well.
#pragma once

#include <cstdint>

namespace flash4::sm90 {

// The 32-bit shared-state-space address of a pointer into this CTA's shared memory.
__device__ __forceinline__ uint32_t smem_address(const void* pointer) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(pointer));
}

// `smem_raw` (the dynamic shared array, only guaranteed 16-byte aligned) advanced to the next multiple of
// `alignment` bytes in the shared address space. Aligned by an offset from the array rather than by
// rounding its generic address as an integer, so the compiler still knows the result points into shared
// memory: reads through it are then 32-bit shared loads, not generic loads that keep a 64-bit pointer live.
template <int kAlignment>
__device__ __forceinline__ char* align_shared(char* smem_raw) {
  static_assert(kAlignment > 0 && (kAlignment & (kAlignment - 1)) == 0, "a power of two");
  return smem_raw + (kAlignment - smem_address(smem_raw) % kAlignment) % kAlignment;
}

__device__ __forceinline__ float2 load_shared_float2(const float* pointer) {
  float2 value;
  asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];\n" : "=f"(value.x), "=f"(value.y) : "r"(smem_address(pointer)));
  return value;
}

__device__ __forceinline__ float4 load_shared_float4(const float* pointer) {
  float4 value;
  asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];\n"
               : "=f"(value.x), "=f"(value.y), "=f"(value.z), "=f"(value.w)
               : "r"(smem_address(pointer)));
  return value;
}

__device__ __forceinline__ void store_shared_u32(uint32_t address, uint32_t value) {
  asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(address), "r"(value) : "memory");
}

__device__ __forceinline__ void store_shared_u32(void* pointer, uint32_t value) {
  store_shared_u32(smem_address(pointer), value);
}

__device__ __forceinline__ void store_shared_float2(float* pointer, float2 value) {
  asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(smem_address(pointer)), "f"(value.x), "f"(value.y) : "memory");
}

__device__ __forceinline__ void store_shared_float4(float* pointer, float4 value) {
  asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"r"(smem_address(pointer)), "f"(value.x), "f"(value.y),
               "f"(value.z), "f"(value.w)
               : "memory");
}

__device__ __forceinline__ uint4 load_shared_u128(uint32_t address) {
  uint4 value;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(value.x), "=r"(value.y), "=r"(value.z), "=r"(value.w)
               : "r"(address)
               : "memory");
  return value;
}

// stmatrix.x4: four 8 x 8 matrices of 16-bit elements, register i of every lane holding row lane / 4,
// elements 2 (lane % 4) and the next, of matrix i (the layout of a wgmma accumulator's packed pairs); lane
// l gives the 16-byte row address of row l % 8 of matrix l / 8.
__device__ __forceinline__ void store_matrix_x4(uint32_t address, uint32_t m0, uint32_t m1, uint32_t m2, uint32_t m3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(address), "r"(m0), "r"(m1),
               "r"(m2), "r"(m3)
               : "memory");
}

// The same, transposed: lane l's address takes column l % 8 of matrix l / 8 (each register's matrix as
// above), so a thread's pair of adjacent columns lands in two rows.
__device__ __forceinline__ void store_matrix_x4_trans(uint32_t address, uint32_t m0, uint32_t m1, uint32_t m2,
                                                      uint32_t m3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(address), "r"(m0),
               "r"(m1), "r"(m2), "r"(m3)
               : "memory");
}

}  // namespace flash4::sm90
