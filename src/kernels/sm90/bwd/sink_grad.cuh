// The gradient of the learnable sinks: dsink[h] = -sum over the used query rows i of head h of
// exp(sink[h] - LSE_i) * D_i, with D_i = rowsum(dO_i * O_i). The preprocess has put D and LSE (log2 units)
// in the workspace rows, so this kernel only reduces them: one CTA per query head walks every sequence's
// used rows, each thread a fixed stride of them, and the partial sums meet in a fixed tree. The order never
// depends on scheduling, so dsink is bit-identical across runs in both modes, without atomics. Padding rows
// are never read (their D is 0 anyway), and a row that saw no key contributes 0 (its O, hence D, is 0).
#pragma once

#include "kernels/sm90/bwd/prepost.cuh"
#include "launch/bwd_params.hpp"

namespace flash4::sm90 {

inline constexpr int kSinkGradThreads = 256;

// grid: (heads_q). The reduction does not depend on the head dim; the template parameter only keeps the kernel
// beside the backward it belongs to (the bf16 and fp16 files of one head dim instantiate the same one, as
// templates may).
template <int kHeadDim>
__global__ void __launch_bounds__(kSinkGradThreads) bwd_sink_grad_kernel(const __grid_constant__ BwdKernelParams p) {
  constexpr int kWarps = kSinkGradThreads / 32;
  const int head = blockIdx.x;
  const float sink_log2 = p.sink[head] * kLog2eF;
  const BwdWorkspaceRows rows = p.workspace_rows();
  float sum = 0.0f;
  for (int batch = 0; batch < p.batch; ++batch) {
    const int seqlen_q = query_rows(p, batch).seqlen_q;
    const long long first = head * p.rows_per_head + rows.first_row(batch, p.cu_seqlens_q);
    for (int row = threadIdx.x; row < seqlen_q; row += kSinkGradThreads) {
      sum += exp2f(sink_log2 - p.lse_log2[first + row]) * p.dsum[first + row];
    }
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  __shared__ float warp_sums[kWarps];
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) total += warp_sums[w];
    p.dsink[head] = -total;
  }
}

}  // namespace flash4::sm90
