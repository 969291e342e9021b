// Split-KV merge: each output row's splits, weighted by exp(lse_split - max lse), give its O and LSE. One
// warp per (sequence, query row, query head) row; lane l holds columns 4l..4l+3 (and 4l + 128.. past 128),
// up to head_dim_v (a multiple of 8, so a lane's 4 columns lie all below it or all past it). A NaN partial
// (a split that met unusable device-side values) makes the row NaN; a row no split saw a key for gets O = 0
// and LSE = -inf.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include <cuda_bf16.h>

#include "kernels/common/online_softmax.hpp"
#include "kernels/sm90/ptx/math.cuh"
#include "launch/decode_params.hpp"

namespace flash4::decode {

inline constexpr int kCombineWarps = 4;
inline constexpr float kLog2eCombine = 1.4426950408889634f;

template <class Element, int kWidth>
__global__ void __launch_bounds__(32 * kCombineWarps) combine_kernel(const __grid_constant__ DecodeParams p) {
  constexpr bool kIsBf16 = std::is_same_v<Element, __nv_bfloat16>;
  constexpr int kColumnsPerLane = 4;
  constexpr int kColumnSteps = (kWidth + 32 * kColumnsPerLane - 1) / (32 * kColumnsPerLane);
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t rows = static_cast<int64_t>(p.batch) * p.seqlen_q * p.heads_q;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kCombineWarps + threadIdx.x / 32;
  if (row >= rows) return;

  // The largest finite LSE over the splits, in log2 units; any NaN poisons the row.
  float max_lse = kNegInf;
  bool any_nan = false;
  for (int split = lane; split < p.splits; split += 32) {
    const float lse = p.partial_lse[split * rows + row];
    any_nan |= lse != lse;
    max_lse = fmaxf(max_lse, lse * kLog2eCombine);
  }
  for (int mask = 16; mask > 0; mask /= 2) max_lse = fmaxf(max_lse, __shfl_xor_sync(0xffffffffu, max_lse, mask));
  any_nan = __any_sync(0xffffffffu, any_nan);
  const float offset = exponent_offset(max_lse);

  float sum = 0.0f;
  float acc[kColumnSteps][kColumnsPerLane] = {};
  for (int split = 0; split < p.splits; ++split) {
    const int64_t partial_row = split * rows + row;
    const float weight = sm90::ex2_approx(p.partial_lse[partial_row] * kLog2eCombine - offset);
    sum += weight;
    if (weight == 0.0f) continue;  // an empty split (partial O = 0)
#pragma unroll
    for (int c = 0; c < kColumnSteps; ++c) {
      const int column = (c * 32 + lane) * kColumnsPerLane;
      if (column >= p.head_dim_v) continue;
      const float4 part = *reinterpret_cast<const float4*>(p.partial_o + partial_row * p.head_dim_v + column);
      acc[c][0] += weight * part.x;
      acc[c][1] += weight * part.y;
      acc[c][2] += weight * part.z;
      acc[c][3] += weight * part.w;
    }
  }
  const float nan = __int_as_float(0x7fffffff);
  const float inverse = sum > 0.0f ? 1.0f / sum : 0.0f;
  const int batch = static_cast<int>(row / (static_cast<int64_t>(p.seqlen_q) * p.heads_q));
  const int query = static_cast<int>(row / p.heads_q % p.seqlen_q);
  const int head = static_cast<int>(row % p.heads_q);
#pragma unroll
  for (int c = 0; c < kColumnSteps; ++c) {
    const int column = (c * 32 + lane) * kColumnsPerLane;
    if (column >= p.head_dim_v) continue;
    float v[kColumnsPerLane];
#pragma unroll
    for (int e = 0; e < kColumnsPerLane; ++e) v[e] = any_nan ? nan : acc[c][e] * inverse;
    const int64_t offset_o = batch * p.o_strides.batch + query * p.o_strides.seq + head * p.o_strides.head + column;
    const uint2 packed{sm90::pack_pair<kIsBf16>(v[0], v[1]), sm90::pack_pair<kIsBf16>(v[2], v[3])};
    *reinterpret_cast<uint2*>(static_cast<char*>(p.o) + offset_o * static_cast<int64_t>(sizeof(Element))) = packed;
  }
  if (lane == 0 && p.lse != nullptr) {
    const float lse = any_nan ? nan : sum > 0.0f ? (offset + __log2f(sum)) / kLog2eCombine : kNegInf;
    p.lse[(static_cast<int64_t>(batch) * p.heads_q + head) * p.seqlen_q + query] = lse;
  }
}

}  // namespace flash4::decode
