// The kernel-params fields the forward and the backward share, named alike in FwdKernelParams and
// BwdKernelParams: sizes, varlen offsets, seqused, the sinks, the softcap and scale constants and the
// window, and the strides in the kernels' own form. One place fills them for both directions, so the two
// cannot drift apart; the decode kernel takes the score constants from here too.
#pragma once

#include "flash4/flash4.h"
#include "launch/tensor_strides.hpp"

namespace flash4::host {

inline constexpr float kLog2e = 1.4426950408889634f;

inline TensorStrides strides_of(const flash4_strides& s) { return TensorStrides{s.batch, s.seq, s.head}; }

// The score constants of every kernel: with softcap the kernels compute softcap * tanh(s * scale / softcap)
// and carry softcap into the exponent.
template <class KernelParams>
void set_score_constants(KernelParams& kp, float softmax_scale, float softcap) {
  kp.has_softcap = softcap > 0.0f;
  kp.scale_log2 = (kp.has_softcap ? softcap : softmax_scale) * kLog2e;
  kp.softcap_prescale = kp.has_softcap ? softmax_scale / softcap : 1.0f;
}

// `p`: validated C params of either direction; the window edges come from the direction's plan.
template <class KernelParams, class Params>
void set_problem_fields(KernelParams& kp, const Params& p, int window_left, int window_right) {
  kp.batch = p.batch;
  kp.seqlen_q = p.seqlen_q;
  kp.seqlen_k = p.seqlen_k;
  kp.heads_q = p.heads_q;
  kp.heads_kv = p.heads_kv;
  kp.total_q = p.total_q;
  kp.cu_seqlens_q = p.cu_seqlens_q;
  kp.cu_seqlens_k = p.cu_seqlens_k;
  kp.seqused_q = p.seqused_q;
  kp.seqused_k = p.seqused_k;
  kp.sink = p.sink;
  set_score_constants(kp, p.softmax_scale, p.softcap);
  kp.window_left = window_left;
  kp.window_right = window_right;
}

}  // namespace flash4::host
