// Forward kernel against the fp64 reference (tolerance rule of tests/tolerance.hpp) over the grid of
// issue 4: head dims x dtypes x masks x GQA/MQA x odd sequence lengths x Sq != Sk x varlen, with
// poisoned outputs inside guard regions. Kernels not compiled into this build are skipped.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "gpu/built_kernel_list.hpp"
#include "gpu/forward_case.hpp"
#include "gpu/gpu_available.hpp"

namespace flash4::test {
namespace {

std::vector<BuiltKernel> built_kernels() { return built_forward_kernels(); }

// Sequence lengths from the FA3/FA4 test suites: tails of every size around the 128-row tiles.
const std::vector<int> kOddLengths = {1, 17, 113, 239, 512, 799, 1023};

std::vector<ForwardCase> forward_grid() {
  std::vector<ForwardCase> cases;
  for (const BuiltKernel& kernel : built_kernels()) {
    ForwardCase base;
    base.dtype = kernel.dtype;
    base.head_dim = kernel.head_dim;
    for (int length : kOddLengths) {
      for (bool causal : {false, true}) {
        ForwardCase c = base;
        c.seqlen_q = c.seqlen_k = length;
        c.causal = causal;
        cases.push_back(c);
      }
    }
    // Sq != Sk both ways, causal bottom-right (Sq > Sk leaves fully masked top rows).
    for (auto [sq, sk] : {std::pair{113, 203}, std::pair{239, 1}, std::pair{799, 3}, std::pair{1023, 1024},
                          std::pair{300, 128}}) {
      for (bool causal : {false, true}) {
        ForwardCase c = base;
        c.seqlen_q = sq;
        c.seqlen_k = sk;
        c.causal = causal;
        cases.push_back(c);
      }
    }
    // GQA 4:1 and MQA, batch 2.
    for (int heads_kv : {1, 2}) {
      ForwardCase c = base;
      c.batch = 2;
      c.heads_q = 8;
      c.heads_kv = heads_kv;
      c.seqlen_q = c.seqlen_k = 257;
      c.causal = heads_kv == 2;
      cases.push_back(c);
    }
    // Sliding windows, softcap.
    for (auto [left, right] : {std::pair{64, 0}, std::pair{100, 37}, std::pair{-1, 50}}) {
      ForwardCase c = base;
      c.seqlen_q = c.seqlen_k = 600;
      c.window_left = left;
      c.window_right = right;
      cases.push_back(c);
    }
    ForwardCase capped = base;
    capped.seqlen_q = capped.seqlen_k = 333;
    capped.softcap = 30.0f;
    capped.causal = true;
    cases.push_back(capped);
    // Varlen with an empty sequence, causal and not.
    for (bool causal : {false, true}) {
      ForwardCase c = base;
      c.varlen_q = {100, 0, 300, 7};
      c.varlen_k = {120, 5, 300, 0};
      c.heads_q = 4;
      c.heads_kv = 2;
      c.causal = causal;
      cases.push_back(c);
    }
    // More tiles than SMs, so every CTA runs several: the tile hand-out's slots are reused, the K/V ring
    // runs on across tiles, and (causal, varlen) tiles are claimed from the workspace counter. The varlen
    // batch has many short sequences under one long max_seqlen: most tiles lie past their sequence's end.
    for (bool causal : {false, true}) {
      ForwardCase c = base;
      c.batch = 4;
      c.heads_q = 12;
      c.heads_kv = 4;
      c.seqlen_q = c.seqlen_k = 640;
      c.causal = causal;
      cases.push_back(c);
    }
    ForwardCase many = base;
    many.heads_q = many.heads_kv = 3;
    many.causal = true;
    for (int b = 0; b < 40; ++b) {
      many.varlen_q.push_back(b == 7 ? 900 : (37 * b + 11) % 230);
      many.varlen_k.push_back(b == 7 ? 900 : (53 * b + 5) % 260);
    }
    cases.push_back(many);
    // Non-contiguous q/k/v: strided views of one packed qkv buffer.
    ForwardCase packed = base;
    packed.batch = 2;
    packed.seqlen_q = packed.seqlen_k = 200;
    packed.packed_qkv = true;
    cases.push_back(packed);
  }
  // Long sequences for the main configuration only (the CPU reference is the slow part).
  for (const BuiltKernel& kernel : built_kernels()) {
    if (kernel.dtype != FLASH4_DTYPE_BF16 || kernel.head_dim != 128) continue;
    for (int length : {2048, 4224}) {
      ForwardCase c;
      c.head_dim = 128;
      c.seqlen_q = c.seqlen_k = length;
      c.heads_q = c.heads_kv = 1;
      c.causal = length == 4224;
      cases.push_back(c);
    }
  }
  return cases;
}

class ForwardGrid : public ::testing::TestWithParam<ForwardCase> {};

TEST_P(ForwardGrid, MatchesReference) {
  FLASH4_REQUIRE_GPU();
  const ForwardOutcome outcome = run_forward_case(GetParam());
  EXPECT_TRUE(outcome.o);
  EXPECT_TRUE(outcome.lse);
  EXPECT_TRUE(outcome.guards);
}

INSTANTIATE_TEST_SUITE_P(Sm90, ForwardGrid, ::testing::ValuesIn(forward_grid()),
                         [](const ::testing::TestParamInfo<ForwardCase>& info) {
                           std::string name = info.param.name();
                           for (char& ch : name) {
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           }
                           return name + "_" + std::to_string(info.index);
                         });

}  // namespace
}  // namespace flash4::test
