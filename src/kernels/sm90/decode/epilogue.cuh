// The end of a decode CTA: the warps of one row tile (its key groups) merge their partial results through
// shared memory, and the CTA writes its rows: O (16-bit) and LSE when the key range is not split, the
// normalized fp32 partial O and its LSE into the workspace when it is (combine.cuh merges the splits).
// A CTA whose sequence's device-side values are unusable, or that met an out-of-range page, writes NaN.
#pragma once

#include <cstdint>

#include "kernels/common/online_softmax.hpp"
#include "kernels/sm90/decode/loader.cuh"
#include "kernels/sm90/decode/warp_attention.cuh"
#include "kernels/sm90/decode/work.cuh"
#include "kernels/sm90/ptx/math.cuh"
#include "launch/decode_config.hpp"
#include "launch/decode_params.hpp"

namespace flash4::decode {

inline constexpr float kLn2 = 0.6931471805599453f;
inline constexpr int kOutputChunk = 8;  // elements per thread and step: one 16-byte store of O

// The merge buffers in the (drained) ring: per warp 16 rows of O and of (max, sum).
template <int kWidth>
struct MergeBuffers {
  float* o;      // [warp][row][Config::kMergeRowFloats]
  float2* stats; // [warp][row]: (row max, row sum)

  __device__ __forceinline__ explicit MergeBuffers(char* ring)
      : o(reinterpret_cast<float*>(ring)),
        stats(reinterpret_cast<float2*>(ring + kWarps * kTileRows * Config<kWidth>::kMergeRowFloats * 4)) {}
  __device__ __forceinline__ float* row(int warp, int r) const {
    return o + (warp * kTileRows + r) * Config<kWidth>::kMergeRowFloats;
  }
};

template <class Element, int kWidth, int kRowTiles>
__device__ __forceinline__ void stash_warp_result(const WarpAttention<Element, kWidth, kRowTiles>& warp, int warp_id,
                                                  const MergeBuffers<kWidth>& merge) {
  const int g = warp.lane / 4;
  const int t = warp.lane % 4;
#pragma unroll
  for (int n = 0; n < WarpAttention<Element, kWidth, kRowTiles>::kDimTiles; ++n) {
    *reinterpret_cast<float2*>(merge.row(warp_id, g) + 8 * n + 2 * t) = make_float2(warp.o[n][0], warp.o[n][1]);
    *reinterpret_cast<float2*>(merge.row(warp_id, g + 8) + 8 * n + 2 * t) = make_float2(warp.o[n][2], warp.o[n][3]);
  }
  if (t == 0) {
    merge.stats[warp_id * kTileRows + g] = make_float2(warp.row_max[0], warp.row_sum[0]);
    merge.stats[warp_id * kTileRows + g + 8] = make_float2(warp.row_max[1], warp.row_sum[1]);
  }
}

// Packed row `r` of the CTA, columns [column, column + 8): the key groups' partials merged and normalized,
// and the row's natural-log LSE (-inf when no key was visible: O = 0).
template <int kWidth, int kRowTiles>
__device__ __forceinline__ float merged_row(const MergeBuffers<kWidth>& merge, int r, int column,
                                            float (&values)[kOutputChunk]) {
  constexpr int kKeyGroups = kWarps / kRowTiles;
  const int tile = r / kTileRows;
  const int in_tile = r % kTileRows;
  float row_max = kNegInf;
#pragma unroll
  for (int group = 0; group < kKeyGroups; ++group) {
    row_max = fmaxf(row_max, merge.stats[(tile + kRowTiles * group) * kTileRows + in_tile].x);
  }
  const float offset = exponent_offset(row_max);
  float sum = 0.0f;
#pragma unroll
  for (int e = 0; e < kOutputChunk; ++e) values[e] = 0.0f;
#pragma unroll
  for (int group = 0; group < kKeyGroups; ++group) {
    const int warp = tile + kRowTiles * group;
    const float2 stats = merge.stats[warp * kTileRows + in_tile];
    const float weight = sm90::ex2_approx(stats.x - offset);  // 0 for a group that saw no key
    sum += weight * stats.y;
    const float* source = merge.row(warp, in_tile) + column;
#pragma unroll
    for (int e = 0; e < kOutputChunk; ++e) values[e] += weight * source[e];
  }
  const float inverse = sum > 0.0f ? 1.0f / sum : 0.0f;
#pragma unroll
  for (int e = 0; e < kOutputChunk; ++e) values[e] *= inverse;
  return sum > 0.0f ? (row_max + __log2f(sum)) * kLn2 : kNegInf;
}

template <class Element, int kWidth, int kRowTiles>
__device__ __forceinline__ void write_rows(const DecodeParams& p, const CtaWork& w, const MergeBuffers<kWidth>& merge,
                                          bool poisoned) {
  constexpr bool kIsBf16 = WarpAttention<Element, kWidth, kRowTiles>::kIsBf16;
  // Only O's true columns (head_dim_v, a multiple of kOutputChunk) are written.
  const int chunks_per_row = p.head_dim_v / kOutputChunk;
  const float nan = __int_as_float(0x7fffffff);
  for (int item = static_cast<int>(threadIdx.x); item < w.row_count * chunks_per_row; item += kThreads) {
    const int r = item / chunks_per_row;
    const int column = (item % chunks_per_row) * kOutputChunk;
    float values[kOutputChunk];
    float lse = merged_row<kWidth, kRowTiles>(merge, r, column, values);
    if (poisoned) {
      lse = nan;
#pragma unroll
      for (int e = 0; e < kOutputChunk; ++e) values[e] = nan;
    }
    const int packed = w.row0 + r;
    const int query = packed / p.group;
    const int head = w.kv_head * p.group + packed % p.group;
    const bool writes_lse = column == 0;
    if (p.splits == 1) {
      const int64_t offset = w.batch * p.o_strides.batch + query * p.o_strides.seq + head * p.o_strides.head + column;
      const uint4 packed_values{sm90::pack_pair<kIsBf16>(values[0], values[1]),
                                sm90::pack_pair<kIsBf16>(values[2], values[3]),
                                sm90::pack_pair<kIsBf16>(values[4], values[5]),
                                sm90::pack_pair<kIsBf16>(values[6], values[7])};
      *reinterpret_cast<uint4*>(element_address<Element>(p.o, offset)) = packed_values;
      if (writes_lse && p.lse != nullptr) {
        p.lse[(static_cast<int64_t>(w.batch) * p.heads_q + head) * p.seqlen_q + query] = lse;
      }
    } else {
      const int64_t partial_row =
          ((static_cast<int64_t>(w.split) * p.batch + w.batch) * p.seqlen_q + query) * p.heads_q + head;
      float4* destination = reinterpret_cast<float4*>(p.partial_o + partial_row * p.head_dim_v + column);
      destination[0] = make_float4(values[0], values[1], values[2], values[3]);
      destination[1] = make_float4(values[4], values[5], values[6], values[7]);
      if (writes_lse) p.partial_lse[partial_row] = lse;
    }
  }
}

}  // namespace flash4::decode
