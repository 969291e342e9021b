// The kernel-params fields the forward and the backward fill through one helper (host/dispatch/
// problem_fields.hpp): each direction's kernel params get the same sizes, pointers, scale constants and window
// from the same C params. No GPU: nothing here launches.
#include <gtest/gtest.h>

#include <cmath>

#include "cpu/validation_params.hpp"
#include "host/dispatch/problem_fields.hpp"
#include "launch/bwd_params.hpp"
#include "launch/fwd_params.hpp"

namespace flash4::validation_test {
namespace {

template <class KernelParams, class Params>
void expect_problem_fields(const KernelParams& kp, const Params& p, int left, int right) {
  EXPECT_EQ(kp.batch, p.batch);
  EXPECT_EQ(kp.seqlen_q, p.seqlen_q);
  EXPECT_EQ(kp.seqlen_k, p.seqlen_k);
  EXPECT_EQ(kp.heads_q, p.heads_q);
  EXPECT_EQ(kp.heads_kv, p.heads_kv);
  EXPECT_EQ(kp.total_q, p.total_q);
  EXPECT_EQ(kp.cu_seqlens_q, p.cu_seqlens_q);
  EXPECT_EQ(kp.cu_seqlens_k, p.cu_seqlens_k);
  EXPECT_EQ(kp.seqused_q, p.seqused_q);
  EXPECT_EQ(kp.seqused_k, p.seqused_k);
  EXPECT_EQ(kp.sink, p.sink);
  EXPECT_EQ(kp.window_left, left);
  EXPECT_EQ(kp.window_right, right);
}

TEST(ProblemFields, BothDirectionsTakeTheSameFieldsFromTheirParams) {
  flash4_fwd_params fwd = valid_fwd();
  flash4_bwd_params bwd = valid_bwd();
  for (auto* sink : {static_cast<const float*>(nullptr), fake_device_pointer<const float>(64)}) {
    fwd.sink = bwd.sink = sink;
    FwdKernelParams fk{};
    BwdKernelParams bk{};
    host::set_problem_fields(fk, fwd, 7, -1);
    host::set_problem_fields(bk, bwd, 7, -1);
    expect_problem_fields(fk, fwd, 7, -1);
    expect_problem_fields(bk, bwd, 7, -1);
  }
}

TEST(ProblemFields, SoftcapMovesTheScaleIntoTheTanh) {
  flash4_fwd_params p = valid_fwd();
  p.softmax_scale = 0.125f;
  FwdKernelParams plain{};
  host::set_problem_fields(plain, p, -1, -1);
  EXPECT_EQ(plain.has_softcap, 0);
  EXPECT_FLOAT_EQ(plain.scale_log2, 0.125f * host::kLog2e);
  EXPECT_FLOAT_EQ(plain.softcap_prescale, 1.0f);

  p.softcap = 30.0f;
  FwdKernelParams capped{};
  host::set_problem_fields(capped, p, -1, -1);
  EXPECT_NE(capped.has_softcap, 0);
  EXPECT_FLOAT_EQ(capped.scale_log2, 30.0f * host::kLog2e);  // softcap * tanh(.) carries softcap into the exponent
  EXPECT_FLOAT_EQ(capped.softcap_prescale, 0.125f / 30.0f);
}

}  // namespace
}  // namespace flash4::validation_test
