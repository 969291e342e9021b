// The two small kernels around the main backward:
//  - preprocess: per query row, D = rowsum(dO * O) and LSE in log2 units into the padded workspace rows
//    (padding rows and fully masked rows get LSE = +inf, so every P computed from them is exactly 0);
//  - postprocess: dQ = softmax_scale * the fp32 accumulator (the sum of its copies, copy 0 first, in
//    deterministic mode), converted to the input dtype.
// One warp per row; each lane handles head_dim / 32 consecutive elements.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/common/bwd_params.hpp"
#include "kernels/common/sequence_rows.hpp"

namespace flash4::sm90 {

inline constexpr int kRowKernelWarps = 8;  // rows per CTA of the row kernels
inline constexpr float kLog2eF = 1.4426950408889634f;

__device__ __forceinline__ SequenceRows query_rows(const BwdKernelParams& p, int batch) {
  return sequence_rows(batch, p.seqlen_q, p.seqlen_k, p.cu_seqlens_q, p.cu_seqlens_k);
}

__device__ __forceinline__ int64_t tensor_offset(const BwdKernelParams& p, const TensorStrides& strides, int batch,
                                                 int64_t seq_row, int head) {
  return (p.cu_seqlens_q ? 0 : int64_t(batch) * strides.batch) + seq_row * strides.seq + int64_t(head) * strides.head;
}

// grid: (ceil((max_seqlen_q + block_m) / warps), heads_q, batch). Covers each sequence's rows and its
// block_m padding rows.
template <class Element, int kHeadDim>
__global__ void __launch_bounds__(kRowKernelWarps * 32) bwd_preprocess_kernel(const __grid_constant__ BwdKernelParams p) {
  constexpr int kPerLane = kHeadDim / 32;
  const int batch = blockIdx.z;
  const int head = blockIdx.y;
  const int row = blockIdx.x * kRowKernelWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const SequenceRows seq = query_rows(p, batch);
  const BwdWorkspaceRows rows = p.workspace_rows();
  const int padded_rows = p.cu_seqlens_q ? seq.seqlen_q + rows.block_m : rows.padded_seqlen();
  if (row >= padded_rows) return;

  float dot = 0.0f;
  float lse_log2 = __int_as_float(0x7f800000);  // +inf
  if (row < seq.seqlen_q) {
    const int64_t seq_row = int64_t(seq.q_row_base) + row;
    const Element* o = static_cast<const Element*>(p.o) + tensor_offset(p, p.o_strides, batch, seq_row, head);
    const Element* dout = static_cast<const Element*>(p.dout) + tensor_offset(p, p.dout_strides, batch, seq_row, head);
#pragma unroll
    for (int e = 0; e < kPerLane; ++e) {
      const int col = lane * kPerLane + e;
      dot += float(o[col]) * float(dout[col]);
    }
    const int64_t lse_index = p.cu_seqlens_q ? int64_t(head) * p.total_q + seq_row
                                             : (int64_t(batch) * p.heads_q + head) * p.seqlen_q + row;
    const float lse = p.lse[lse_index];
    if (lse != -__int_as_float(0x7f800000)) lse_log2 = lse * kLog2eF;
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, offset);
  if (lane == 0) {
    const long long index = head * p.rows_per_head + rows.first_row(batch, p.cu_seqlens_q) + row;
    p.dsum[index] = dot;
    p.lse_log2[index] = lse_log2;
  }
}

// grid: (ceil(max_seqlen_q / warps), heads_q, batch).
template <class Element, int kHeadDim>
__global__ void __launch_bounds__(kRowKernelWarps * 32) bwd_postprocess_kernel(const __grid_constant__ BwdKernelParams p) {
  constexpr int kPerLane = kHeadDim / 32;
  const int batch = blockIdx.z;
  const int head = blockIdx.y;
  const int row = blockIdx.x * kRowKernelWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const SequenceRows seq = query_rows(p, batch);
  if (row >= seq.seqlen_q) return;
  const BwdWorkspaceRows rows = p.workspace_rows();
  const float* accum = p.dq_accum + (head * p.rows_per_head + rows.first_row(batch, p.cu_seqlens_q) + row) * kHeadDim;
  const int64_t copy_stride = int64_t(p.heads_q) * p.rows_per_head * kHeadDim;
  Element* dq = static_cast<Element*>(p.dq) + tensor_offset(p, p.dq_strides, batch, int64_t(seq.q_row_base) + row, head);
#pragma unroll
  for (int e = 0; e < kPerLane; ++e) {
    const int col = lane * kPerLane + e;
    float sum = accum[col];
    for (int copy = 1; copy < p.dq_copies; ++copy) sum += accum[copy * copy_stride + col];  // always in this order
    dq[col] = Element(sum * p.softmax_scale);
  }
}

}  // namespace flash4::sm90
