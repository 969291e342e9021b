// Where one sequence's rows lie in the q/k/v tensors, fixed length or varlen (cu_seqlens): the forward's
// and the backward's tile resolvers both start from it.
#pragma once

#include "kernels/common/host_device.hpp"

namespace flash4 {

struct SequenceRows {
  int q_row_base;  // TMA seq coordinate of the sequence's row 0 (nonzero in varlen mode)
  int k_row_base;
  int seqlen_q;
  int seqlen_k;
  int tma_batch;   // TMA batch coordinate (0 in varlen mode: one slice holds every sequence)
};

FLASH4_HD SequenceRows sequence_rows(int batch, int seqlen_q, int seqlen_k, const int* cu_seqlens_q,
                                     const int* cu_seqlens_k) {
  if (cu_seqlens_q == nullptr) return SequenceRows{0, 0, seqlen_q, seqlen_k, batch};
  const int q_base = cu_seqlens_q[batch];
  const int k_base = cu_seqlens_k[batch];
  return SequenceRows{q_base, k_base, cu_seqlens_q[batch + 1] - q_base, cu_seqlens_k[batch + 1] - k_base, 0};
}

}  // namespace flash4
