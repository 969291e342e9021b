// Writes one consumer warpgroup's 64 x D output rows and their LSE straight from registers, with row
// predicates so that tile rows past the end of the sequence (and, in varlen mode, rows of the next
// sequence) are never touched.
#pragma once

#include <cstdint>
#include <type_traits>

#include "kernels/common/fwd_params.hpp"
#include "kernels/sm90/fwd/tile_work.cuh"
#include "kernels/sm90/ptx/math.cuh"

namespace flash4::sm90 {

template <class Element, int kHeadDim>
struct FwdEpilogue {
  static constexpr bool kIsBf16 = !std::is_same_v<Element, __half>;

  // o: the accumulator (o[4k + 2i + j] = row lane/4 + 8i, column 8k + 2(lane%4) + j); row0: this
  // thread's first row within the sequence.
  __device__ __forceinline__ static void store(const FwdKernelParams& p, const TileWork& work, int row0,
                                               const float (&o)[kHeadDim / 2], const float (&inv_sum)[2],
                                               const float (&lse)[2]) {
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int row = row0 + 8 * i;
      if (row >= work.seqlen_q) continue;
      const int64_t seq_row = int64_t(work.q_row_base) + row;
      Element* out = static_cast<Element*>(p.o) + (p.cu_seqlens_q ? 0 : int64_t(work.batch) * p.o_stride_batch) +
                     seq_row * p.o_stride_seq + int64_t(work.head) * p.o_stride_head;
#pragma unroll
      for (int k = 0; k < kHeadDim / 8; ++k) {
        const uint32_t packed = pack_pair<kIsBf16>(o[4 * k + 2 * i] * inv_sum[i], o[4 * k + 2 * i + 1] * inv_sum[i]);
        *reinterpret_cast<uint32_t*>(out + 8 * k + 2 * (lane % 4)) = packed;
      }
      if (p.lse != nullptr && lane % 4 == 0) {
        const int64_t index = p.cu_seqlens_q ? int64_t(work.head) * p.total_q + seq_row
                                             : (int64_t(work.batch) * p.heads_q + work.head) * p.seqlen_q + row;
        p.lse[index] = lse[i];
      }
    }
  }
};

}  // namespace flash4::sm90
