// Non-tensor bulk copies (cp.async.bulk): contiguous global -> shared loads completing on an mbarrier;
// shared -> global stores and reduce-adds, and the per-thread bulk groups that track them; the acquire/release
// flag operations the deterministic backward orders its reduce-adds with.
#pragma once

#include <cstdint>
#include <cuda/ptx>

#include "kernels/sm90/ptx/shared.cuh"

namespace flash4::sm90 {

// Copies `bytes` (a multiple of 16, both addresses 16-byte aligned) into this CTA's shared memory;
// completion is reported on `barrier` as transaction bytes.
__device__ __forceinline__ void bulk_load(void* smem, const void* global, uint32_t bytes, uint64_t* barrier) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                   smem_address(smem)),
               "l"(global), "r"(bytes), "r"(smem_address(barrier))
               : "memory");
}

// Bulk groups: the bulk reduce-adds and tensor stores (tma.cuh) a thread issued since its last commit
// form one group, which it can wait for.
__device__ __forceinline__ void bulk_commit_group() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }

// Adds `bytes` of fp32 values from this CTA's shared memory element-wise into global memory (both addresses
// 16-byte aligned, a multiple of 16 bytes), as part of the thread's current bulk group.
__device__ __forceinline__ void bulk_reduce_add_f32(float* global, const float* smem, uint32_t bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(global),
               "r"(smem_address(smem)), "r"(bytes)
               : "memory");
}

// Copies `bytes` from this CTA's shared memory to global memory (both addresses 16-byte aligned, a multiple
// of 16 bytes), as part of the thread's current bulk group.
__device__ __forceinline__ void bulk_store(void* global, const void* smem, uint32_t bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n" ::"l"(global),
               "r"(smem_address(smem)), "r"(bytes)
               : "memory");
}

// Waits until this thread's bulk groups have finished reading their shared-memory sources.
__device__ __forceinline__ void bulk_wait_group_read_all() {
  asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
}
// Waits until this thread's bulk groups have completed, writes included.
__device__ __forceinline__ void bulk_wait_group_all() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }

// Orders the async proxy's global accesses (bulk copies) against this thread's generic ones.
__device__ __forceinline__ void fence_async_global() { asm volatile("fence.proxy.async.global;\n" ::: "memory"); }

__device__ __forceinline__ int load_acquire_gpu(const int* flag) {
  int value;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(value) : "l"(flag) : "memory");
  return value;
}
__device__ __forceinline__ void spin_until_acquire_gpu(const int* flag, int value) {
  while (load_acquire_gpu(flag) != value) {
  }
}
__device__ __forceinline__ void store_release_gpu(int* flag, int value) {
  asm volatile("st.release.gpu.global.b32 [%0], %1;\n" ::"l"(flag), "r"(value) : "memory");
}

}  // namespace flash4::sm90
