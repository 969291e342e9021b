// wgmma: warpgroup matrix multiply-accumulate (sm_90a), shared-memory matrix descriptors, and the fences
// that order the asynchronous MMAs against ordinary register use.
#pragma once

#include <cstdint>

#include "kernels/sm90/ptx/shared.cuh"

namespace flash4::sm90 {

// Swizzle modes of the shared-memory matrix descriptor (bits 62-63), matching the TMA swizzle that wrote
// the tile.
enum class SmemSwizzle : uint64_t { k128B = 1, k64B = 2, k32B = 3 };

// Descriptor fields hold byte quantities divided by 16 (the hardware ignores the low 4 bits).
__device__ __forceinline__ uint64_t descriptor_field(uint32_t bytes) { return uint64_t((bytes & 0x3FFFF) >> 4); }

// A shared-memory matrix descriptor.
//  - K-major operand (rows of the tile run along M/N, each row holds K contiguous elements): the
//    leading offset is unused for swizzled layouts; stride_bytes is the distance between groups of
//    8 rows (8 x the swizzle width).
//  - MN-major operand (used transposed, e.g. V in O += P V): leading_bytes is the distance between
//    swizzle-width column blocks along N; stride_bytes the distance between groups of 8 K-rows.
__device__ __forceinline__ uint64_t make_smem_descriptor(const void* smem, uint32_t leading_bytes, uint32_t stride_bytes,
                                                         SmemSwizzle swizzle) {
  const uint32_t address = smem_address(smem);
  return descriptor_field(address) | (descriptor_field(leading_bytes) << 16) | (descriptor_field(stride_bytes) << 32) |
         (uint64_t(swizzle) << 62);
}

// The same descriptor in every lane, said so to the compiler: a value broadcast from lane 0 is known to be
// warp-uniform, so the descriptor and the offsets added to it stay in uniform registers, which is where
// wgmma reads it from, instead of being copied there for every wgmma.
__device__ __forceinline__ uint64_t warp_uniform(uint64_t descriptor) {
  return __shfl_sync(0xffffffffu, descriptor, 0);
}

// Moves a descriptor's start address by `bytes` (a multiple of 16).
__device__ __forceinline__ uint64_t advance_descriptor(uint64_t descriptor, uint32_t bytes) {
  return descriptor + uint64_t(bytes >> 4);
}

// Orders register writes by ordinary instructions before the wgmma that reads/accumulates them.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
// Waits until at most kPending committed groups of this warpgroup are still in flight.
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}

// The compiler does not know that an issued wgmma writes its accumulators later: this empty asm pins
// each register so no read or write of it is moved across an issue or a wait.
template <int kCount>
__device__ __forceinline__ void pin_registers(float (&regs)[kCount]) {
#pragma unroll
  for (int i = 0; i < kCount; ++i) asm volatile("" : "+f"(regs[i])::"memory");
}
template <int kRows, int kCols>
__device__ __forceinline__ void pin_registers(float (&regs)[kRows][kCols]) {
#pragma unroll
  for (int i = 0; i < kRows; ++i) pin_registers(regs[i]);
}
template <int kRows, int kCols>
__device__ __forceinline__ void pin_registers(uint32_t (&regs)[kRows][kCols]) {
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
#pragma unroll
    for (int j = 0; j < kCols; ++j) asm volatile("" : "+r"(regs[i][j])::"memory");
  }
}

// D (64 x N, fp32) (+)= A (64 x 16) * B (16 x N); kIsBf16 picks bf16 or fp16 inputs.
template <int N, bool kIsBf16>
struct WgmmaSS;
template <int N, bool kIsBf16>
struct WgmmaRS;

#include "kernels/sm90/ptx/wgmma_ops.inc"

}  // namespace flash4::sm90
