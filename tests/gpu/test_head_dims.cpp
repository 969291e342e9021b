// Head dims that no kernel has, served by the smallest built kernel wider than them, and v's head dim apart
// from q's (head_dim_v): forward (O, LSE) and backward (dq, dk, dv) against the fp64 reference, on strided
// tensors whose rows are padded up to the widest kernel's head dim with poison that must stay untouched (the
// columns between a tensor's head dim and its kernel's are neither read into a result nor written), and with
// poisoned outputs, guard regions and workspace. A case no built kernel is wide enough for is skipped.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "gpu/backward_case.hpp"
#include "gpu/gpu_available.hpp"
#include "host/kernel_choice.hpp"

namespace flash4::test {
namespace {

// Odd lengths, Sq != Sk: partial tiles at both ends of the key and query ranges.
constexpr int kSeqlenQ = 113;
constexpr int kSeqlenK = 203;

BackwardCase head_dim_case(int head_dim, int head_dim_v, bool causal) {
  BackwardCase c;
  c.head_dim = head_dim;
  c.head_dim_v = head_dim_v;
  c.seqlen_q = kSeqlenQ;
  c.seqlen_k = kSeqlenK;
  c.heads_q = 4;
  c.heads_kv = 2;
  c.causal = causal;
  c.strided = true;
  return c;
}

// Every kernel width is reached: 8 and 40 (kernel 64), 72 and 80 (96, or 128 without it), 120 (128), 136 and
// 160 (192), 200 and 248 (256); v narrower than q (DeepSeek's 192 / 128) and wider; varlen through the
// epilogues' row-predicated stores (not TMA) at two widths.
std::vector<BackwardCase> head_dim_cases() {
  std::vector<BackwardCase> cases;
  bool causal = false;
  for (int d : {8, 40, 72, 80, 120, 136, 160, 200, 248}) {
    cases.push_back(head_dim_case(d, 0, causal));
    causal = !causal;
  }
  for (bool causal : {false, true}) cases.push_back(head_dim_case(192, 128, causal));
  cases.push_back(head_dim_case(64, 128, false));
  for (auto [d, dv] : {std::pair{80, 0}, std::pair{192, 128}}) {
    BackwardCase varlen = head_dim_case(d, dv, true);
    varlen.varlen_q = {kSeqlenQ, 40, 1};
    varlen.varlen_k = {kSeqlenK, 77, 9};
    cases.push_back(varlen);
  }
  return cases;
}

class HeadDims : public ::testing::TestWithParam<BackwardCase> {};

TEST_P(HeadDims, MatchesReferenceAndLeavesThePaddingAlone) {
  FLASH4_REQUIRE_GPU();
  const BackwardCase& c = GetParam();
  const int needed = std::max(c.head_dim, c.head_dim_v);
  const int forward = host::serving_head_dim(host::built_forward_kernels(), c.dtype, needed);
  const int backward = host::serving_head_dim(host::built_backward_kernels(), c.dtype, needed);
  if (forward == 0 || backward == 0) GTEST_SKIP() << "this build has no kernel of head dim >= " << needed;
  SCOPED_TRACE("served by head dim " + std::to_string(backward));
  expect_matches_reference(run_backward_case(c));
}

INSTANTIATE_TEST_SUITE_P(Sm90, HeadDims, ::testing::ValuesIn(head_dim_cases()),
                         [](const ::testing::TestParamInfo<BackwardCase>& info) {
                           return test_name(info.param, info.index);
                         });

}  // namespace
}  // namespace flash4::test
