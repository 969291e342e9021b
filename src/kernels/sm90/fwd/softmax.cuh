// The consumer's softmax on one S tile held in wgmma accumulator registers, with FA4's two tricks:
// lazy rescaling (keep a stale row max while it is within the threshold) and a compile-time share of
// the exponentials computed by the FMA-pipe polynomial instead of the MUFU unit.
//
// Register layout (wgmma m64nN accumulator): s[4k + 2i + j] is row (lane / 4) + 8i of the warp's 16
// rows, column 8k + 2 (lane % 4) + j. Each thread thus owns two rows; a row is spread over the 4
// threads of a quad.
#pragma once

#include <cfloat>
#include <cstdint>

#include "kernels/common/mask.hpp"
#include "kernels/common/online_softmax.hpp"
#include "kernels/common/soft_exp2.hpp"
#include "kernels/sm90/ptx/math.cuh"

namespace flash4::sm90 {

inline constexpr float kLn2 = 0.6931471805599453f;
inline constexpr float kLog2e = 1.4426950408889634f;

__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

template <int kBlockN, int kSoftExp2Eighths>
struct RowSoftmax {
  static constexpr int kRegs = kBlockN / 2;   // S floats per thread
  static constexpr int kColBlocks = kBlockN / 8;
  static constexpr int kMaxChains = 4;  // independent running maxima per row (see step)
  static_assert(kColBlocks >= kMaxChains, "every chain starts from a column block");

  float max_log2[2];  // running (possibly stale) max in log2 units; the exponent offset
  float sum[2];       // this thread's partial row sums (reduced over the quad at the end)
  float previous_max[2];  // max_log2 before the latest step
  float tile_sum[2];      // the latest step's partial row sums, not yet in `sum`

  __device__ __forceinline__ void reset() {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      max_log2[i] = kNegInf;
      sum[i] = 0.0f;
    }
  }

  // softcap * tanh(s * scale / softcap); the caller's scale_log2 then carries softcap * log2(e).
  __device__ __forceinline__ static void apply_softcap(float (&s)[kRegs], float prescale) {
#pragma unroll
    for (int r = 0; r < kRegs; ++r) s[r] = tanh_approx(s[r] * prescale);
  }

  // Sets masked scores to -inf. row0: the tile-relative index of this thread's first row plus the
  // tile's first row in its sequence; col0: the key block's first key. Each row's visible keys in the
  // block are one run, turned once per row into a bit per accumulator column of this thread
  // (fragment_run), so an entry costs a bit test instead of the window evaluated per entry.
  __device__ __forceinline__ static void apply_mask(float (&s)[kRegs], const MaskSpec& mask, int row0, int col0) {
    static_assert(kRegs / 2 <= 64, "one 64-bit mask per row");
    const int first_column = 2 * (threadIdx.x % 4);  // this thread's columns: first_column + 8 k + j
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const RowSpan span = keys_seen_by_row(mask, row0 + 8 * i, col0 + first_column, kBlockN - first_column);
      const FragmentRun run = fragment_run(span);
      const uint64_t below_end = run.end >= 64 ? ~0ull : (1ull << run.end) - 1;
      const uint64_t below_begin = run.begin >= 64 ? ~0ull : (1ull << run.begin) - 1;
      const uint64_t visible = below_end & ~below_begin;
#pragma unroll
      for (int k = 0; k < kColBlocks; ++k) {
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          if (!((visible >> (2 * k + j)) & 1)) s[4 * k + 2 * i + j] = kNegInf;
        }
      }
    }
  }

  // Folds one S tile into the row maxima and turns S into unnormalized probabilities in place. Returns
  // true when the warp decided to move its maxima; fold_sum then completes the step.
  __device__ __forceinline__ bool step(float (&s)[kRegs], float scale_log2) {
    float tile_max[2];
    bool wants_rescale = false;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      // kMaxChains running maxima joined at the end, not one: the same comparisons, but a chain of about
      // kColBlocks / kMaxChains dependent ones between S's arrival and the first exponential.
      float m[kMaxChains];
#pragma unroll
      for (int c = 0; c < kMaxChains; ++c) m[c] = fmaxf(s[4 * c + 2 * i], s[4 * c + 2 * i + 1]);
#pragma unroll
      for (int k = kMaxChains; k < kColBlocks; ++k) {
        m[k % kMaxChains] = fmaxf(m[k % kMaxChains], fmaxf(s[4 * k + 2 * i], s[4 * k + 2 * i + 1]));
      }
#pragma unroll
      for (int width = 1; width < kMaxChains; width *= 2) {
#pragma unroll
        for (int c = 0; c + width < kMaxChains; c += 2 * width) m[c] = fmaxf(m[c], m[c + width]);
      }
      tile_max[i] = quad_max(m[0]) * scale_log2;
      wants_rescale |= needs_rescale(max_log2[i], tile_max[i], kLazyRescaleThresholdLog2);
    }
    // Warp-uniform decision: the O multiply is skipped by the whole warp or done by it.
    const bool rescale = __any_sync(0xffffffffu, wants_rescale);
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      previous_max[i] = max_log2[i];
      max_log2[i] = rescale ? fmaxf(max_log2[i], tile_max[i]) : max_log2[i];
      // exponent_offset's guard (a row that has seen only masked scores must not compute -inf - -inf) as one
      // instruction: the lowest finite float instead of 0 serves the same (2^(-inf - offset) is still 0) and
      // is a max, not a compare and a select.
      const float offset = fmaxf(max_log2[i], -FLT_MAX);
      // -0, not 0: p + -0 is p for every p, so the compiler drops the add; p + 0 turns -0 into +0, so it stays.
      float row_sum = -0.0f;
#pragma unroll
      for (int k = 0; k < kColBlocks; ++k) {
        // The first kSoftExp2Eighths of every 8 column blocks go to the FMA polynomial.
        const bool on_fma = (k % 8) < kSoftExp2Eighths;
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const float x = fmaf(s[4 * k + 2 * i + j], scale_log2, -offset);
          const float p = on_fma ? soft_exp2(x) : ex2_approx(x);
          s[4 * k + 2 * i + j] = p;
          row_sum += p;
        }
      }
      tile_sum[i] = row_sum;
    }
    return rescale;
  }

  // Completes a step: when it moved the maxima, `factor` gets the multipliers that move O (and the running
  // sum) from the old maxima to the new; then the tile's sum joins the running sum. The branch on
  // `rescale` also ends a basic block, which the consumer relies on (see FwdConsumer::attend).
  __device__ __forceinline__ void fold_sum(bool rescale, float (&factor)[2]) {
    // Both arms read the tile's sum, so the branch cannot be hoisted above the exponentials.
    if (rescale) {
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        factor[i] = previous_max[i] == kNegInf ? 1.0f : ex2_approx(previous_max[i] - max_log2[i]);
        sum[i] = sum[i] * factor[i] + tile_sum[i];
      }
    } else {
#pragma unroll
      for (int i = 0; i < 2; ++i) sum[i] += tile_sum[i];
    }
  }

  // Final per-row normalizer of O (0 for an empty row) and the natural-log LSE (-inf for an empty row).
  // sink_log2: the head's learnable sink logit times log2(e), or -inf without sinks. The sink is one more
  // column without a value: it joins the row max (exactly, so that a large logit cannot overflow the sum),
  // then the sum; O, accumulated against the old max, takes the move of the max in its normalizer. Without
  // a sink the max does not move and this is 1 / l. A row that saw no key but has a sink gets O = 0 and
  // LSE = the sink.
  __device__ __forceinline__ void finish(float (&inv_sum)[2], float (&lse)[2], float sink_log2) const {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const float row_max = fmaxf(max_log2[i], sink_log2);
      const float keep = row_max == max_log2[i] ? 1.0f : ex2_approx(max_log2[i] - row_max);
      const float total = quad_sum(sum[i]) * keep + (sink_log2 == kNegInf ? 0.0f : ex2_approx(sink_log2 - row_max));
      const bool empty = !(total > 0.0f);
      inv_sum[i] = empty ? 0.0f : keep / total;
      lse[i] = empty ? kNegInf : (row_max + __log2f(total)) * kLn2;
    }
  }
};

}  // namespace flash4::sm90
