// Thread block clusters (the paired-CTA backward): the cluster-wide barrier, addresses in the partner
// CTA's shared memory, arrivals on its mbarriers, and bulk copies into it.
#pragma once

#include <cstdint>
#include <cuda/ptx>

#include "kernels/sm90/ptx/shared.cuh"

namespace flash4::sm90 {

// Every thread of every CTA of the cluster arrives, then waits for all: the barriers one CTA initialized
// are then visible to the others, and no CTA leaves while another may still write into its shared memory.
__device__ __forceinline__ void cluster_sync_all() {
  cuda::ptx::barrier_cluster_arrive(cuda::ptx::sem_release);
  cuda::ptx::barrier_cluster_wait(cuda::ptx::sem_acquire);
}

// The shared::cluster address of the same shared-memory object in the cluster's CTA `rank`. Volatile,
// so that it is computed where it is used: the dQ writer has 24 registers and cannot keep it live.
__device__ __forceinline__ uint32_t cluster_shared_address(const void* pointer, int rank) {
  uint32_t address;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n"
               : "=r"(address)
               : "r"(smem_address(pointer)), "r"(rank));
  return address;
}

// One arrival (release at cluster scope) on an mbarrier of any CTA of the cluster.
__device__ __forceinline__ void mbarrier_arrive_cluster(uint32_t cluster_barrier) {
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];\n" ::"r"(cluster_barrier) : "memory");
}

// One arrival on an mbarrier of any CTA of the cluster that orders this thread's earlier accesses only
// at CTA scope (no GPU-wide memory barrier): for a consumer warp releasing a stage whose reads have all
// completed (wgmmas waited for, and ld.shared values already consumed), as CUTLASS's consumer release.
__device__ __forceinline__ void mbarrier_arrive_cluster_cta_order(uint32_t cluster_barrier) {
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];\n" ::"r"(cluster_barrier) : "memory");
}

// Blocks until the phase with the given parity has completed, acquiring at cluster scope (the arrivals
// came from another CTA of the cluster).
__device__ __forceinline__ void mbarrier_wait_cluster(uint64_t* barrier, uint32_t parity) {
  while (!cuda::ptx::mbarrier_try_wait_parity(cuda::ptx::sem_acquire, cuda::ptx::scope_cluster, barrier, parity)) {
  }
}

// Copies `bytes` (a multiple of 16) of this CTA's shared memory to `cluster_dst` in another CTA of the
// cluster; completion is reported there, on `cluster_barrier`, as transaction bytes.
__device__ __forceinline__ void bulk_copy_to_cluster_cta(uint32_t cluster_dst, const void* src, uint32_t bytes,
                                                         uint32_t cluster_barrier) {
  asm volatile("cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                   cluster_dst),
               "r"(smem_address(src)), "r"(bytes), "r"(cluster_barrier)
               : "memory");
}

}  // namespace flash4::sm90
