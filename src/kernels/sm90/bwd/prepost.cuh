// The two small kernels around the main backward:
//  - preprocess: per query row, D = rowsum(dO * O) and LSE in log2 units into the padded workspace rows
//    (padding rows and fully masked rows get LSE = +inf, so every P computed from them is exactly 0), the
//    row of the fp32 dQ accumulator zeroed outside deterministic mode (the main kernel reduce-adds into the
//    query blocks' regions only, padding rows included, and the postprocess reads within them; zeroed here
//    rather than by a memset of the whole accumulator, one launch fewer; in deterministic mode each copy's
//    first write stores, bwd_dq_copy_written), and the main kernel's tile counter reset;
//  - postprocess: dQ = softmax_scale * the fp32 accumulator (in deterministic mode the sum of the copies
//    that have a contributor, in copy order), converted to the input dtype. The accumulator keeps each query
//    block's floats in the main kernel's staging order (BwdTileConfig::dq_staging_index), so the zeroing of a
//    block's rows covers exactly its region whatever the order inside.
// Both touch only the true columns of o, dout (p.cols_v) and dq (p.cols), which a wider kernel may serve: the
// columns past them read as 0 and are never written. Both only move memory. A warp takes kRowsPerWarp rows,
// each lane head_dim / 32 consecutive elements of every one, and issues all of its rows' loads before using
// any: one row at a time (two bf16 per lane at D = 64) kept too few bytes in flight, and the preprocess at D =
// 64, 512 tokens took a quarter as long as the main kernel.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "kernels/common/mask.hpp"
#include "kernels/common/sequence_rows.hpp"
#include "launch/bwd_tile_config.hpp"
#include "launch/bwd_params.hpp"

namespace flash4::sm90 {

inline constexpr int kRowKernelWarps = 8;
inline constexpr int kRowsPerWarp = 4;
inline constexpr int kRowsPerRowKernelCta = kRowKernelWarps * kRowsPerWarp;
inline constexpr float kLog2eF = 1.4426950408889634f;

// The widest access (at most 16 bytes) that divides a lane's run of `bytes`: every run starts at a
// multiple of `bytes` from a 16-byte aligned row (the validator's stride rule; the workspace's rows too).
template <int kBytes>
struct LaneRun {
  static constexpr int kUnitBytes = kBytes % 16 == 0 ? 16 : kBytes % 8 == 0 ? 8 : kBytes % 4 == 0 ? 4 : 2;
  using Unit = std::conditional_t<kUnitBytes == 16, uint4,
                                  std::conditional_t<kUnitBytes == 8, uint2,
                                                     std::conditional_t<kUnitBytes == 4, uint32_t, uint16_t>>>;
  static constexpr int kUnits = kBytes / kUnitBytes;
};

// A lane's run of N elements, moved with the widest accesses its alignment allows. The units go through
// memcpy into and out of the element array: a first version wrote the elements through a struct-of-char
// lvalue, which breaks C++'s aliasing rules, and its postprocess produced a wrong dQ on the GPU.
// `count` limits an access to the run's first count elements (count <= 0: none), where a row's true head
// dim ends inside or before the run: the units past it are not read (they load as 0) or written. Head dims
// are multiples of 8 elements and a run starts at a multiple of its unit, which divides 8 elements, so a
// unit lies wholly on one side of the end.
template <class T, int N>
struct LaneValues {
  using Run = LaneRun<N * int(sizeof(T))>;
  T values[N];

  static constexpr int kUnitElements = Run::kUnitBytes / int(sizeof(T));
  static_assert(8 % kUnitElements == 0, "a unit never straddles the end of a head dim");

  __device__ __forceinline__ void load(const T* src, int count = N) {
    load_units([&](int element) { return src + element; }, count);
  }
  // As load, from a run stored in pieces: the unit starting at the run's element e is at address(e).
  template <class Address>
  __device__ __forceinline__ void load_units(const Address& address, int count = N) {
#pragma unroll
    for (int u = 0; u < Run::kUnits; ++u) {
      typename Run::Unit unit{};
      if (u * kUnitElements < count) unit = *reinterpret_cast<const typename Run::Unit*>(address(u * kUnitElements));
      memcpy(reinterpret_cast<char*>(values) + u * Run::kUnitBytes, &unit, Run::kUnitBytes);
    }
  }
  __device__ __forceinline__ void store(T* dst, int count = N) const {
#pragma unroll
    for (int u = 0; u < Run::kUnits; ++u) {
      if (u * kUnitElements >= count) break;
      typename Run::Unit unit;
      memcpy(&unit, reinterpret_cast<const char*>(values) + u * Run::kUnitBytes, Run::kUnitBytes);
      reinterpret_cast<typename Run::Unit*>(dst)[u] = unit;
    }
  }
};

__device__ __forceinline__ SequenceRows query_rows(const BwdKernelParams& p, int batch) {
  return sequence_rows(batch, p.seqlen_q, p.seqlen_k, p.cu_seqlens_q, p.cu_seqlens_k, p.seqused_q, p.seqused_k);
}

__device__ __forceinline__ int64_t tensor_offset(const BwdKernelParams& p, const TensorStrides& strides, int batch,
                                                 int64_t seq_row, int head) {
  return (p.cu_seqlens_q ? 0 : int64_t(batch) * strides.batch) + seq_row * strides.seq + int64_t(head) * strides.head;
}

// The first of the warp's rows.
__device__ __forceinline__ int first_warp_row() {
  return (blockIdx.x * kRowKernelWarps + threadIdx.x / 32) * kRowsPerWarp;
}

// The row kernels' grid: x covers a sequence's rows, y and z the (query head, sequence) pairs, y fastest:
// gridDim.y and z stop at 65535 each, heads_q x batch only at FLASH4_MAX_BLOCKS (validation), which two of
// them cover.
inline constexpr int kMaxGridY = 65535;
inline dim3 bwd_row_grid(int rows, const BwdKernelParams& p) {
  const int pairs = p.heads_q * p.batch;
  const int y = pairs < kMaxGridY ? pairs : kMaxGridY;
  return dim3(unsigned((rows + kRowsPerRowKernelCta - 1) / kRowsPerRowKernelCta), unsigned(y),
              unsigned((pairs + y - 1) / y));
}
template <class Body>
__device__ __forceinline__ void for_this_head_and_sequence(const BwdKernelParams& p, const Body& body) {
  const int pair = blockIdx.z * gridDim.y + blockIdx.y;
  if (pair < p.heads_q * p.batch) body(pair % p.heads_q, pair / p.heads_q);
}

// Covers each sequence's rows and its block_m padding rows (grid: bwd_row_grid(max_seqlen_q + block_m)).
template <class Element, int kHeadDim>
__device__ __forceinline__ void preprocess_rows(const BwdKernelParams& p, int head, int batch) {
  constexpr int kPerLane = kHeadDim / 32;
  const int row0 = first_warp_row();
  const int lane = threadIdx.x % 32;
  const SequenceRows seq = query_rows(p, batch);
  const BwdWorkspaceRows rows = p.workspace_rows();
  const int padded_rows = p.cu_seqlens_q ? seq.seqlen_q + rows.block_m : rows.padded_seqlen();
  if (row0 >= padded_rows) return;

  LaneValues<Element, kPerLane> o[kRowsPerWarp];
  LaneValues<Element, kPerLane> dout[kRowsPerWarp];
  float lse[kRowsPerWarp];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int row = row0 + r;
    if (row >= seq.seqlen_q) continue;
    const int64_t seq_row = int64_t(seq.q_row_base) + row;
    const int count = p.cols_v - lane * kPerLane;  // of this lane's run inside the rows of o and dout
    o[r].load(static_cast<const Element*>(p.o) + tensor_offset(p, p.o_strides, batch, seq_row, head) + lane * kPerLane,
              count);
    dout[r].load(static_cast<const Element*>(p.dout) + tensor_offset(p, p.dout_strides, batch, seq_row, head) +
                     lane * kPerLane,
                 count);
    const int64_t lse_index = p.cu_seqlens_q ? int64_t(head) * p.total_q + seq_row
                                             : (int64_t(batch) * p.heads_q + head) * p.seqlen_q + row;
    lse[r] = p.lse[lse_index];
  }
  const long long first_index = head * p.rows_per_head + rows.first_row(batch, p.cu_seqlens_q) + row0;
  LaneValues<float, kPerLane> zeros;
#pragma unroll
  for (int e = 0; e < kPerLane; ++e) zeros.values[e] = 0.0f;
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int row = row0 + r;
    if (row >= padded_rows) break;
    float dot = 0.0f;
    float lse_log2 = __int_as_float(0x7f800000);  // +inf
    if (row < seq.seqlen_q) {
#pragma unroll
      for (int e = 0; e < kPerLane; ++e) dot += float(o[r].values[e]) * float(dout[r].values[e]);
      if (lse[r] != -__int_as_float(0x7f800000)) lse_log2 = lse[r] * kLog2eF;
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, offset);
    if (lane == 0) {
      p.dsum[first_index + r] = dot;
      p.lse_log2[first_index + r] = lse_log2;
    }
    if (!p.deterministic) zeros.store(p.dq_accum + (first_index + r) * kHeadDim + lane * kPerLane);
  }
}

template <class Element, int kHeadDim>
__global__ void __launch_bounds__(kRowKernelWarps * 32) bwd_preprocess_kernel(const __grid_constant__ BwdKernelParams p) {
  if (blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0 && threadIdx.x == 0) *p.tile_counter = 0;
  for_this_head_and_sequence(p, [&](int head, int batch) { preprocess_rows<Element, kHeadDim>(p, head, batch); });
}

// grid: bwd_row_grid(max_seqlen_q).
template <class Element, int kHeadDim>
__device__ __forceinline__ void postprocess_rows(const BwdKernelParams& p, int head, int batch) {
  constexpr int kPerLane = kHeadDim / 32;
  const int row0 = first_warp_row();
  const int lane = threadIdx.x % 32;
  const SequenceRows seq = query_rows(p, batch);
  if (row0 >= seq.seqlen_q) return;
  const BwdWorkspaceRows rows = p.workspace_rows();
  // The accumulator holds each query block in the main kernel's staging order (dq_staging_index); the
  // warp's rows lie in one block, and a lane's loads never cross an 8-column box of it.
  constexpr BwdTileConfig kCfg = bwd_tile_config(kHeadDim);
  using AccumRun = LaneValues<float, kPerLane>;
  static_assert(kCfg.block_m % kRowsPerWarp == 0, "a warp's rows lie in one query block");
  static_assert(kCfg.dq_box_cols() % AccumRun::kUnitElements == 0, "no load crosses an 8-column box");
  const int block_row0 = row0 / kCfg.block_m * kCfg.block_m;
  const float* block =
      p.dq_accum + (head * p.rows_per_head + rows.first_row(batch, p.cu_seqlens_q) + block_row0) * kHeadDim;
  const int64_t copy_stride = p.dq_copy_stride(kHeadDim);
  const auto load_row = [&](AccumRun& run, int copy, int r) {
    const float* row_block = block + copy * copy_stride;
    const int row_in_block = row0 - block_row0 + r;
    run.load_units([&](int e) { return row_block + kCfg.dq_staging_index(row_in_block, lane * kPerLane + e); });
  };

  // Outside deterministic mode the one copy was zeroed by the preprocess; in it, only the copies with a
  // contributor were written.
  const MaskSpec mask{seq.seqlen_q, seq.seqlen_k, p.window_left, p.window_right};
  const KeyBlockRange contributors = key_block_range(mask, block_row0, kCfg.block_m, kCfg.block_n);
  AccumRun sum[kRowsPerWarp];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
#pragma unroll
    for (int e = 0; e < kPerLane; ++e) sum[r].values[e] = 0.0f;
  }
  for (int copy = 0; copy < p.dq_copies; ++copy) {  // always in this order
    if (p.deterministic && !bwd_dq_copy_written(copy, contributors.begin, contributors.end, p.dq_copies)) continue;
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      if (row0 + r >= seq.seqlen_q) continue;
      AccumRun part;
      load_row(part, copy, r);
#pragma unroll
      for (int e = 0; e < kPerLane; ++e) sum[r].values[e] += part.values[e];
    }
  }
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int row = row0 + r;
    if (row >= seq.seqlen_q) break;
    LaneValues<Element, kPerLane> dq;
#pragma unroll
    for (int e = 0; e < kPerLane; ++e) dq.values[e] = Element(sum[r].values[e] * p.softmax_scale);
    dq.store(static_cast<Element*>(p.dq) + tensor_offset(p, p.dq_strides, batch, int64_t(seq.q_row_base) + row, head) +
                 lane * kPerLane,
             p.cols - lane * kPerLane);
  }
}

template <class Element, int kHeadDim>
__global__ void __launch_bounds__(kRowKernelWarps * 32) bwd_postprocess_kernel(const __grid_constant__ BwdKernelParams p) {
  for_this_head_and_sequence(p, [&](int head, int batch) { postprocess_rows<Element, kHeadDim>(p, head, batch); });
}

}  // namespace flash4::sm90
