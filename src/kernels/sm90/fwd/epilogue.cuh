// Writes one consumer warpgroup's 64 x D output rows and their LSE. Where the tile config stages O in
// shared memory (head dim <= 128), O goes through it: out with a TMA store for fixed-length problems
// (the store clips rows past the end of the sequence), with coalesced 16-byte row-predicated stores in
// varlen mode. Otherwise, and for the LSE, straight from registers. Tile rows past the end of the
// sequence (and, in varlen mode, rows of the next sequence) are never touched, nor columns past O's true
// head dim (p.o_cols, which a wider kernel serves: the TMA store clips at the map's extent, the other stores
// test the column; o_cols is a multiple of 8, so a 16-byte chunk or a pair lies wholly on one side).
#pragma once

#include <cstdint>
#include <type_traits>

#include "kernels/sm90/fwd/pipeline.cuh"
#include "kernels/sm90/fwd/tile_work.cuh"
#include "kernels/sm90/ptx/bulk.cuh"
#include "kernels/sm90/ptx/math.cuh"
#include "kernels/sm90/ptx/shared.cuh"
#include "kernels/sm90/ptx/sync.cuh"
#include "kernels/sm90/ptx/tma.cuh"
#include "launch/fwd_params.hpp"

namespace flash4::sm90 {

// Named barrier 1 + consumer warpgroups + w: the 128 threads of consumer warpgroup w around its O staging
// buffer (the ids below are the turn ring's, consumer.cuh).
inline constexpr int fwd_epilogue_barrier(int consumer_warpgroups, int warpgroup) {
  return 1 + consumer_warpgroups + warpgroup;
}

template <class Element, int kHeadDim>
struct FwdEpilogue {
  static constexpr bool kIsBf16 = !std::is_same_v<Element, __half>;
  using Layout = FwdSmemLayout<kHeadDim>;
  static constexpr FwdTileConfig kCfg = Layout::kCfg;
  static constexpr int kRows = kRowsPerConsumerWarpgroup;  // the TMA box height
  static constexpr int kSwizzle = kCfg.swizzle_bytes;
  static constexpr int kBoxBytes = kRows * kSwizzle;

  // The smem image of a TMA box with the 64- or 128-byte swizzle: 16-byte chunk index XOR the row bits
  // above the swizzle width (byte-offset bits 7.. folded onto bits 4..).
  __device__ __forceinline__ static uint32_t swizzled(uint32_t offset) {
    return offset ^ (((offset >> 7) & (kSwizzle / 16 - 1)) << 4);
  }

  // O of this warpgroup -> its staging boxes -> global memory: one TMA store per box, issued by the
  // warpgroup's first thread, for fixed-length problems; in varlen mode, 16-byte stores by all threads
  // with a row predicate (a TMA box overhanging the sequence would write the next sequence's rows). The
  // buffer is reused tile after tile: the first barrier orders this tile's writes after the previous
  // tile's reads (the issuer first waits until its stores have read the buffer).
  __device__ __forceinline__ static void store_staged(const FwdKernelParams& p, const TileWork& work, int warpgroup,
                                                      char* smem, const float (&o)[kHeadDim / 2],
                                                      const float (&inv_sum)[2]) {
    const int lane = threadIdx.x % 32;
    const int warp_in_group = (threadIdx.x / 32) % 4;
    const int thread_in_group = threadIdx.x % kWarpgroupThreads;
    const int barrier = fwd_epilogue_barrier(kCfg.consumer_warpgroups, warpgroup);
    char* staging = smem + Layout::kOOffset + warpgroup * (kCfg.o_bytes() / kCfg.consumer_warpgroups);
    if (thread_in_group == 0) bulk_wait_group_read_all();
    named_barrier_sync(barrier, kWarpgroupThreads);
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int row = warp_in_group * 16 + lane / 4 + 8 * i;
#pragma unroll
      for (int k = 0; k < kHeadDim / 8; ++k) {
        const int col = 8 * k + 2 * (lane % 4);
        store_shared_u32(staging + staged_offset(row, col),
                         pack_pair<kIsBf16>(o[4 * k + 2 * i] * inv_sum[i], o[4 * k + 2 * i + 1] * inv_sum[i]));
      }
    }
    if (p.store_o_with_tma) fence_async_shared();  // the generic-proxy writes must be visible to the TMA store
    named_barrier_sync(barrier, kWarpgroupThreads);
    const int tile_row0 = work.m0 + warpgroup * kRows;  // within the sequence
    if (p.store_o_with_tma) {
      if (thread_in_group == 0) {
#pragma unroll
        for (int box = 0; box < kCfg.col_blocks(); ++box) {
          tma_store_4d(&p.tma_o, staging + box * kBoxBytes, box * kCfg.box_cols(), work.q_row_base + tile_row0,
                       work.head, work.tma_batch);
        }
        bulk_commit_group();
      }
      return;
    }
    constexpr int kChunksPerRow = kHeadDim * kElementBytes / 16;
    Element* out = static_cast<Element*>(p.o) + (p.cu_seqlens_q ? 0 : int64_t(work.batch) * p.o_strides.batch) +
                   int64_t(work.head) * p.o_strides.head;
#pragma unroll 1  // unrolled, its addresses cost D = 96 a spill in the main loop
    for (int index = thread_in_group; index < kRows * kChunksPerRow; index += kWarpgroupThreads) {
      const int row = index / kChunksPerRow;
      const int col = index % kChunksPerRow * 8;
      if (tile_row0 + row >= work.seqlen_q || col >= p.o_cols) continue;
      const uint4 chunk = *reinterpret_cast<const uint4*>(staging + staged_offset(row, col));
      *reinterpret_cast<uint4*>(out + (int64_t(work.q_row_base) + tile_row0 + row) * p.o_strides.seq + col) = chunk;
    }
  }

  // Byte offset of (row, col) of a warpgroup's O within its staging boxes.
  __device__ __forceinline__ static uint32_t staged_offset(int row, int col) {
    const int box = col / kCfg.box_cols();
    return box * kBoxBytes + swizzled(row * kSwizzle + (col % kCfg.box_cols()) * kElementBytes);
  }

  // The last stores must have read shared memory before the CTA exits.
  __device__ __forceinline__ static void drain() {
    if (threadIdx.x % kWarpgroupThreads == 0) bulk_wait_group_all();
  }

  __device__ __forceinline__ static void store_lse(const FwdKernelParams& p, const TileWork& work, int row0,
                                                   const float (&lse)[2]) {
    if (p.lse == nullptr || threadIdx.x % 4 != 0) return;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int row = row0 + 8 * i;
      if (row >= work.seqlen_q) continue;
      const int64_t seq_row = int64_t(work.q_row_base) + row;
      const int64_t index = p.cu_seqlens_q ? int64_t(work.head) * p.total_q + seq_row
                                           : (int64_t(work.batch) * p.heads_q + work.head) * p.seqlen_q + row;
      p.lse[index] = lse[i];
    }
  }

  __device__ __forceinline__ static void store(const FwdKernelParams& p, const TileWork& work, int warpgroup, char* smem,
                                               int row0, const float (&o)[kHeadDim / 2], const float (&inv_sum)[2],
                                               const float (&lse)[2]) {
    if constexpr (kCfg.stages_output()) {
      store_staged(p, work, warpgroup, smem, o, inv_sum);
    } else {
      store_from_registers(p, work, row0, o, inv_sum);
    }
    store_lse(p, work, row0, lse);
  }

  // o: the accumulator (o[4k + 2i + j] = row lane/4 + 8i, column 8k + 2(lane%4) + j); row0: this
  // thread's first row within the sequence.
  __device__ __forceinline__ static void store_from_registers(const FwdKernelParams& p, const TileWork& work, int row0,
                                                              const float (&o)[kHeadDim / 2], const float (&inv_sum)[2]) {
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int row = row0 + 8 * i;
      if (row >= work.seqlen_q) continue;
      const int64_t seq_row = int64_t(work.q_row_base) + row;
      Element* out = static_cast<Element*>(p.o) + (p.cu_seqlens_q ? 0 : int64_t(work.batch) * p.o_strides.batch) +
                     seq_row * p.o_strides.seq + int64_t(work.head) * p.o_strides.head;
#pragma unroll
      for (int k = 0; k < kHeadDim / 8; ++k) {
        const int col = 8 * k + 2 * (lane % 4);
        if (col >= p.o_cols) break;
        const uint32_t packed = pack_pair<kIsBf16>(o[4 * k + 2 * i] * inv_sum[i], o[4 * k + 2 * i + 1] * inv_sum[i]);
        *reinterpret_cast<uint32_t*>(out + col) = packed;
      }
    }
  }
};

}  // namespace flash4::sm90
