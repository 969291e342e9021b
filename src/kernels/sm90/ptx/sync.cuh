// Warp-role plumbing: register reallocation between warpgroups, named barriers, elected lanes.
#pragma once

#include <cstdint>

namespace flash4::sm90 {

// setmaxnreg: a warpgroup gives registers back (producer) or takes them (consumers). Needs a register
// cap at kernel entry (__launch_bounds__(threads, 1)).
template <int kRegisters>
__device__ __forceinline__ void warpgroup_release_registers() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}
template <int kRegisters>
__device__ __forceinline__ void warpgroup_claim_registers() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}

// Named barriers (ids 1..15; 0 is __syncthreads). `threads` counts both the syncing and arriving sides.
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// Makes this thread's generic-proxy shared-memory writes visible to the async proxy (TMA, wgmma).
__device__ __forceinline__ void fence_async_shared() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

}  // namespace flash4::sm90
