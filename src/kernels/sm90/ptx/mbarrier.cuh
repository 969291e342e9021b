// mbarrier: the shared-memory barriers that TMA completes and that producer and consumers use to hand
// pipeline stages to each other. Thin wrappers over libcu++'s cuda::ptx.
#pragma once

#include <cstdint>
#include <cuda/ptx>

namespace flash4::sm90 {

__device__ __forceinline__ void mbarrier_init(uint64_t* barrier, uint32_t arrivals) {
  cuda::ptx::mbarrier_init(barrier, arrivals);
}

// Makes the initialized barriers visible to the async proxy (TMA) and the rest of the CTA.
__device__ __forceinline__ void mbarrier_init_fence() { cuda::ptx::fence_mbarrier_init(cuda::ptx::sem_release, cuda::ptx::scope_cluster); }

// One arrival that also announces `bytes` of TMA traffic the phase must wait for.
__device__ __forceinline__ void mbarrier_arrive_expect_bytes(uint64_t* barrier, uint32_t bytes) {
  cuda::ptx::mbarrier_arrive_expect_tx(cuda::ptx::sem_release, cuda::ptx::scope_cta, cuda::ptx::space_shared, barrier, bytes);
}

__device__ __forceinline__ void mbarrier_arrive(uint64_t* barrier) { (void)cuda::ptx::mbarrier_arrive(barrier); }

// Blocks until the phase with the given parity has completed.
__device__ __forceinline__ void mbarrier_wait(uint64_t* barrier, uint32_t parity) {
  while (!cuda::ptx::mbarrier_try_wait_parity(barrier, parity)) {
  }
}

}  // namespace flash4::sm90
