// Where one sequence's rows lie in the q/k/v tensors, fixed length or varlen (cu_seqlens), and how many of
// them it uses (seqused, when given: the first seqused[b] rows of its span): the forward's and the
// backward's tile resolvers both start from it.
#pragma once

#include "kernels/common/host_device.hpp"

namespace flash4 {

struct SequenceRows {
  int q_row_base;  // TMA seq coordinate of the sequence's row 0 (nonzero in varlen mode)
  int k_row_base;
  int seqlen_q;     // rows used: the masks align to these, and no row past them is written
  int seqlen_k;
  int tma_batch;   // TMA batch coordinate (0 in varlen mode: one slice holds every sequence)
};

// seqused[batch], which the caller promises lies in [0, span] (device memory: the host cannot check it, as
// with cu_seqlens). Not clamped here: the clamp cost the backward's tile resolver a register spill.
FLASH4_HD int used_rows(const int* seqused, int batch, int span) { return seqused == nullptr ? span : seqused[batch]; }

FLASH4_HD SequenceRows sequence_rows(int batch, int seqlen_q, int seqlen_k, const int* cu_seqlens_q,
                                     const int* cu_seqlens_k, const int* seqused_q, const int* seqused_k) {
  SequenceRows rows{0, 0, seqlen_q, seqlen_k, batch};
  if (cu_seqlens_q != nullptr) {
    rows.q_row_base = cu_seqlens_q[batch];
    rows.k_row_base = cu_seqlens_k[batch];
    rows.seqlen_q = cu_seqlens_q[batch + 1] - rows.q_row_base;
    rows.seqlen_k = cu_seqlens_k[batch + 1] - rows.k_row_base;
    rows.tma_batch = 0;
  }
  rows.seqlen_q = used_rows(seqused_q, batch, rows.seqlen_q);
  rows.seqlen_k = used_rows(seqused_k, batch, rows.seqlen_k);
  return rows;
}

}  // namespace flash4
