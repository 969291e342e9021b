// One warp's share of a decode CTA: a 16-row tile of packed query rows against its key group's slice of
// every key block (16 x row_tiles keys), with an online softmax in fp32 and log2 units. S = Q K^T and
// O += P V are mma.sync m16n8k16 products; P goes from the S accumulators to A fragments in registers.
//
// Each thread holds two rows of the tile (g = lane / 4 and g + 8) and, per 8-key tile of S, keys 2t and
// 2t + 1 (t = lane % 4); row maxima are reduced over the 4 lanes of a row with two shuffles, row sums stay
// per thread until the end.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>
#include <type_traits>

#include "kernels/common/mask.hpp"
#include "kernels/common/online_softmax.hpp"
#include "kernels/sm90/decode/loader.cuh"
#include "kernels/sm90/decode/work.cuh"
#include "kernels/sm90/ptx/math.cuh"
#include "kernels/sm90/ptx/mma_sync.cuh"
#include "launch/decode_config.hpp"
#include "launch/decode_params.hpp"

namespace flash4::decode {

template <class Element, int kWidth, int kRowTiles>
struct WarpAttention {
  static constexpr bool kIsBf16 = std::is_same_v<Element, __nv_bfloat16>;
  static constexpr int kKeyGroups = kWarps / kRowTiles;
  static constexpr int kWarpKeys = kBlockKeys / kKeyGroups;  // keys of each block this warp handles
  static constexpr int kKeyTiles = kWarpKeys / 8;            // n8 tiles of S
  static constexpr int kDimSteps = kWidth / 16;            // k16 steps of S, n16 pairs of O
  static constexpr int kDimTiles = kWidth / 8;             // n8 tiles of O
  static constexpr int kChunksPerRow = Config<kWidth>::kChunksPerRow;
  static constexpr bool kQInRegisters = Config<kWidth>::kQInRegisters;
  static_assert(kWarpKeys % 16 == 0, "whole k16 steps of P V");

  int row_tile;
  int key_group;
  int lane;
  uint32_t q_tile;                              // the CTA's Q tile in shared memory
  uint32_t q[kQInRegisters ? kDimSteps : 1][4];  // Q's A fragments, where they stay in registers
  float o[kDimTiles][4];
  float row_max[2];  // running max of rows g and g + 8 (log2 units); -inf before any visible key
  float row_sum[2];  // this thread's share of the running sum of 2^(score - row_max)

  __device__ __forceinline__ void init(int warp, int lane_id) {
    row_tile = warp % kRowTiles;
    key_group = warp / kRowTiles;
    lane = lane_id;
#pragma unroll
    for (int n = 0; n < kDimTiles; ++n) {
#pragma unroll
      for (int c = 0; c < 4; ++c) o[n][c] = 0.0f;
    }
    row_max[0] = row_max[1] = kNegInf;
    row_sum[0] = row_sum[1] = 0.0f;
  }

  // The A fragments of k16 step `step` of the warp's 16 Q rows, one x4 load (matrices: rows 0-7 / 8-15 x
  // the step's first / second 8 columns).
  __device__ __forceinline__ void load_q_step(int step, uint32_t (&a)[4]) const {
    const int matrix = lane / 8;
    const int row = row_tile * kTileRows + (matrix % 2) * 8 + lane % 8;
    sm90::load_matrix_x4(a, q_tile + swizzled_offset<kChunksPerRow>(row, 2 * step + matrix / 2));
  }

  // Once Q has landed in `tile`: its fragments into registers where they stay there (kQInRegisters).
  __device__ __forceinline__ void load_q_fragments(uint32_t tile) {
    q_tile = tile;
    if constexpr (kQInRegisters) {
#pragma unroll
      for (int step = 0; step < kDimSteps; ++step) load_q_step(step, q[step]);
    }
  }

  __device__ __forceinline__ void q_fragment(int step, uint32_t (&a)[4]) const {
    if constexpr (kQInRegisters) {
#pragma unroll
      for (int c = 0; c < 4; ++c) a[c] = q[step][c];
    } else {
      load_q_step(step, a);
    }
  }

  // S for the warp's keys of the stage: per k16 step, one x4 load gives the B fragments of two key tiles
  // (matrices: keys 0-7 / 8-15 x the step's first / second 8 columns).
  __device__ __forceinline__ void scores(uint32_t k_stage, float (&s)[kKeyTiles][4]) const {
#pragma unroll
    for (int t = 0; t < kKeyTiles; ++t) {
#pragma unroll
      for (int c = 0; c < 4; ++c) s[t][c] = 0.0f;
    }
    const int matrix = lane / 8;
    const int key_in_pair = (matrix / 2) * 8 + lane % 8;
#pragma unroll Config<kWidth>::kScoreStepsUnrolled
    for (int step = 0; step < kDimSteps; ++step) {
      uint32_t a[4];
      q_fragment(step, a);
#pragma unroll
      for (int pair = 0; pair < kKeyTiles / 2; ++pair) {
        const int key = key_group * kWarpKeys + pair * 16 + key_in_pair;
        uint32_t b[4];
        sm90::load_matrix_x4(b, k_stage + swizzled_offset<kChunksPerRow>(key, 2 * step + matrix % 2));
        sm90::mma_m16n8k16<kIsBf16>(s[2 * pair], a, b[0], b[1]);
        sm90::mma_m16n8k16<kIsBf16>(s[2 * pair + 1], a, b[2], b[3]);
      }
    }
  }

  // Scaled (and capped) scores in log2 units; masked entries -inf when `masked`.
  __device__ __forceinline__ void scale_and_mask(const DecodeParams& p, const CtaWork& w, int block, bool masked,
                                                 float (&s)[kKeyTiles][4]) const {
    // The query rows of the thread's two packed rows (g and g + 8).
    const int packed = w.row0 + row_tile * kTileRows + lane / 4;
    const int query[2] = {packed / p.group, (packed + 8) / p.group};
    const int first_key = block * kBlockKeys + key_group * kWarpKeys + 2 * (lane % 4);
#pragma unroll
    for (int t = 0; t < kKeyTiles; ++t) {
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        float x = s[t][c];
        x = p.has_softcap ? sm90::tanh_approx(x * p.softcap_prescale) * p.scale_log2 : x * p.scale_log2;
        if (masked && !key_visible(w.mask, query[c >> 1], first_key + t * 8 + (c & 1))) x = kNegInf;
        s[t][c] = x;
      }
    }
  }

  // Moves the running max of both rows to include this block, rescales O and the sums, and turns the
  // scores into probabilities 2^(s - max).
  __device__ __forceinline__ void online_softmax(float (&s)[kKeyTiles][4]) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      float block_max = kNegInf;
#pragma unroll
      for (int t = 0; t < kKeyTiles; ++t) block_max = fmaxf(block_max, fmaxf(s[t][2 * half], s[t][2 * half + 1]));
      block_max = fmaxf(block_max, __shfl_xor_sync(0xffffffffu, block_max, 1));
      block_max = fmaxf(block_max, __shfl_xor_sync(0xffffffffu, block_max, 2));
      const float new_max = fmaxf(row_max[half], block_max);
      const float offset = exponent_offset(new_max);
      const float correction = sm90::ex2_approx(row_max[half] - offset);  // 0 while row_max is -inf
      row_max[half] = new_max;
      row_sum[half] *= correction;
#pragma unroll
      for (int n = 0; n < kDimTiles; ++n) {
        o[n][2 * half] *= correction;
        o[n][2 * half + 1] *= correction;
      }
#pragma unroll
      for (int t = 0; t < kKeyTiles; ++t) {
        s[t][2 * half] = sm90::ex2_approx(s[t][2 * half] - offset);
        s[t][2 * half + 1] = sm90::ex2_approx(s[t][2 * half + 1] - offset);
        row_sum[half] += s[t][2 * half] + s[t][2 * half + 1];
      }
    }
  }

  // O += P V: P's A fragments come from two adjacent key tiles of S; V's B fragments from transposed x4
  // loads (matrices: keys 0-7 / 8-15 x an n16 pair's first / second 8 columns).
  __device__ __forceinline__ void accumulate(uint32_t v_stage, const float (&s)[kKeyTiles][4]) {
    const int matrix = lane / 8;
    const int key_in_step = (matrix % 2) * 8 + lane % 8;
#pragma unroll
    for (int step = 0; step < kKeyTiles / 2; ++step) {
      const uint32_t a[4] = {sm90::pack_pair<kIsBf16>(s[2 * step][0], s[2 * step][1]),
                             sm90::pack_pair<kIsBf16>(s[2 * step][2], s[2 * step][3]),
                             sm90::pack_pair<kIsBf16>(s[2 * step + 1][0], s[2 * step + 1][1]),
                             sm90::pack_pair<kIsBf16>(s[2 * step + 1][2], s[2 * step + 1][3])};
      const int key = key_group * kWarpKeys + step * 16 + key_in_step;
#pragma unroll
      for (int pair = 0; pair < kDimSteps; ++pair) {
        uint32_t b[4];
        sm90::load_matrix_x4_trans(b, v_stage + swizzled_offset<kChunksPerRow>(key, 2 * pair + matrix / 2));
        sm90::mma_m16n8k16<kIsBf16>(o[2 * pair], a, b[0], b[1]);
        sm90::mma_m16n8k16<kIsBf16>(o[2 * pair + 1], a, b[2], b[3]);
      }
    }
  }

  // One key block from its K and V stages.
  __device__ __forceinline__ void process(const DecodeParams& p, const CtaWork& w, int block, uint32_t k_stage,
                                          uint32_t v_stage) {
    float s[kKeyTiles][4];
    scores(k_stage, s);
    scale_and_mask(p, w, block, w.range.needs_mask(block), s);
    online_softmax(s);
    accumulate(v_stage, s);
  }

  // The row sums over the 4 lanes of each row, once the last block is in.
  __device__ __forceinline__ void finish_sums() {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      row_sum[half] += __shfl_xor_sync(0xffffffffu, row_sum[half], 1);
      row_sum[half] += __shfl_xor_sync(0xffffffffu, row_sum[half], 2);
    }
  }
};

}  // namespace flash4::decode
