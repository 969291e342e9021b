// TMA (the bulk tensor copy engine): 4-D tiled loads from global memory into shared memory that
// complete on an mbarrier, and 4-D tiled stores back that the issuing thread tracks as bulk groups
// (bulk.cuh: commit, wait).
#pragma once

#include <cuda.h>

#include <cstdint>
#include <cuda/ptx>

namespace flash4::sm90 {

// Loads the box at coordinates (c0 innermost .. c3) of `map` into `smem`; completion (and the byte
// count) is reported on `barrier`. A plain (non-cluster) launch is a cluster of one CTA, so the
// shared::cluster form addresses this CTA's own shared memory.
__device__ __forceinline__ void tma_load_4d(void* smem, const CUtensorMap* map, uint64_t* barrier, int c0, int c1, int c2,
                                            int c3) {
  const int32_t coords[4] = {c0, c1, c2, c3};
  cuda::ptx::cp_async_bulk_tensor(cuda::ptx::space_cluster, cuda::ptx::space_global, smem, map, coords, barrier);
}

// Stores `smem` into the box at coordinates (c0 innermost .. c3) of `map`; elements outside the map's
// extents are skipped, so a tile that overhangs the end of the sequence writes only its valid rows.
__device__ __forceinline__ void tma_store_4d(const CUtensorMap* map, const void* smem, int c0, int c1, int c2, int c3) {
  const int32_t coords[4] = {c0, c1, c2, c3};
  cuda::ptx::cp_async_bulk_tensor(cuda::ptx::space_global, cuda::ptx::space_shared, map, coords, smem);
}

// Pulls a descriptor into the constant cache ahead of its first use.
__device__ __forceinline__ void tma_prefetch_descriptor(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

}  // namespace flash4::sm90
