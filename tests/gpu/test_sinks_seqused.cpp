// Learnable sinks and seqused_q / seqused_k on the GPU, forward and backward, against the fp64 reference
// (tolerance rule of tests/tolerance.hpp): O and LSE, dq, dk, dv and dsink, with every output poisoned inside
// guard regions. Unused rows (past seqused) must keep their poison (flash4.h: left untouched). Sinks are
// checked causal and not, with GQA, fully masked rows (Sq > Sk causal, an empty key sequence: O = 0 and
// LSE = the sink), logits far above and below the scores, and bit-identical gradients (dsink included) over
// runs in deterministic mode. seqused is checked fixed length and varlen with ragged values, 0 and the full
// span included. The main kernel only (bf16, D = 128 when built): sinks and seqused change the softmax's end
// and the sequence rows, which every head dim shares.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "gpu/backward_case.hpp"
#include "gpu/built_kernel_list.hpp"
#include "gpu/gpu_available.hpp"

namespace flash4::test {
namespace {

struct Labelled {
  const char* label;
  BackwardCase c;
};

// gtest prints parameters with this instead of dumping their bytes.
void PrintTo(const Labelled& l, std::ostream* os) { *os << l.c.name(); }

// Sink logits for heads_q heads: spread around the scores' range (unit-normal inputs give scores of a few units).
std::vector<float> sinks(int heads, float first = -1.5f, float step = 1.0f) {
  std::vector<float> values(heads);
  for (int h = 0; h < heads; ++h) values[h] = first + step * float(h);
  return values;
}

std::vector<Labelled> cases() {
  const BuiltKernel kernel = main_of(built_backward_kernels());
  BackwardCase base;
  base.dtype = kernel.dtype;
  base.head_dim = kernel.head_dim;
  std::vector<Labelled> all;
  const auto add = [&all](const char* label, BackwardCase c) { all.push_back({label, std::move(c)}); };

  BackwardCase gqa = base;  // fixed length, Sq != Sk, odd sizes (a partial block of each side)
  gqa.batch = 2;
  gqa.seqlen_q = 200;
  gqa.seqlen_k = 333;
  gqa.heads_q = 4;
  gqa.heads_kv = 2;
  gqa.sink = sinks(4);
  add("sink_gqa", gqa);
  gqa.causal = true;
  add("sink_gqa_causal", gqa);

  BackwardCase masked = base;  // causal with Sq > Sk: the first 200 rows see no key, LSE = the sink
  masked.seqlen_q = 300;
  masked.seqlen_k = 100;
  masked.heads_q = 4;
  masked.heads_kv = 1;
  masked.causal = true;
  masked.sink = sinks(4, -0.5f, 0.5f);
  add("sink_fully_masked_rows", masked);

  BackwardCase extremes = base;  // a sink far above every score (the max moves to it) and far below
  extremes.seqlen_q = extremes.seqlen_k = 256;
  extremes.heads_q = extremes.heads_kv = 2;
  extremes.sink = {40.0f, -40.0f};
  add("sink_extremes", extremes);

  BackwardCase varlen = base;  // an empty key sequence and an empty query sequence, with a window and softcap
  varlen.varlen_q = {100, 64, 0, 130};
  varlen.varlen_k = {120, 0, 50, 200};
  varlen.heads_q = 4;
  varlen.heads_kv = 2;
  varlen.causal = true;
  varlen.window_left = 70;
  varlen.softcap = 20.0f;
  varlen.sink = sinks(4, 0.25f, -0.75f);
  add("sink_varlen_window_softcap", varlen);

  BackwardCase used = base;  // fixed length: ragged, 0 and the full span, on both sides
  used.batch = 3;
  used.seqlen_q = used.seqlen_k = 256;
  used.heads_q = 4;
  used.heads_kv = 2;
  used.causal = true;
  used.seqused_q = {200, 0, 256};
  used.seqused_k = {100, 256, 0};
  add("seqused_fixed_causal", used);
  used.causal = false;
  used.seqused_k = {};
  add("seqused_q_only", used);
  used.seqused_q = {};
  used.seqused_k = {1, 129, 256};
  add("seqused_k_only", used);

  BackwardCase used_varlen = base;  // varlen, with sinks: the sink's gradient sums the used rows only
  used_varlen.varlen_q = {130, 64, 200, 10};
  used_varlen.varlen_k = {150, 90, 40, 70};
  used_varlen.seqused_q = {129, 0, 200, 3};
  used_varlen.seqused_k = {1, 90, 0, 65};
  used_varlen.heads_q = 4;
  used_varlen.heads_kv = 1;
  used_varlen.causal = true;
  used_varlen.sink = sinks(4);
  add("seqused_varlen_sink", used_varlen);
  return all;
}

class SinksAndSeqused : public ::testing::TestWithParam<Labelled> {};

TEST_P(SinksAndSeqused, MatchReference) {
  FLASH4_REQUIRE_GPU();
  const BackwardCase& c = GetParam().c;
  SCOPED_TRACE(c.name());
  const BackwardOutcome outcome = run_backward_case(c);
  SCOPED_TRACE("seed " + std::to_string(outcome.seed));
  ASSERT_TRUE(outcome.calls);
  ASSERT_TRUE(outcome.unavailable.empty()) << outcome.unavailable;
  EXPECT_TRUE(outcome.unused_rows);
  EXPECT_TRUE(outcome.o);
  EXPECT_TRUE(outcome.lse);
  EXPECT_TRUE(outcome.dq);
  EXPECT_TRUE(outcome.dk);
  EXPECT_TRUE(outcome.dv);
  EXPECT_TRUE(outcome.dsink);
  EXPECT_TRUE(outcome.untouched);
}

INSTANTIATE_TEST_SUITE_P(Sm90, SinksAndSeqused, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Labelled>& info) { return std::string(info.param.label); });

// The sink's gradient is a fixed-order reduction: bit-identical over runs, like dq, dk and dv in deterministic
// mode (and in the other mode too, which this also checks for dsink alone).
TEST(SinksDeterminism, BitIdenticalOverRuns) {
  FLASH4_REQUIRE_GPU();
  constexpr int kRuns = 50;
  const BuiltKernel kernel = main_of(built_backward_kernels());
  for (const bool deterministic : {true, false}) {
    BackwardCase c;
    c.dtype = kernel.dtype;
    c.head_dim = kernel.head_dim;
    c.batch = 2;
    c.seqlen_q = c.seqlen_k = 1024;
    c.heads_q = 8;
    c.heads_kv = 2;
    c.causal = true;
    c.deterministic = deterministic;
    c.sink = sinks(8, -2.0f, 0.5f);
    SCOPED_TRACE(c.name());
    const std::uint64_t seed = ref::fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    BackwardDevice device(c, ref::random_inputs(c.problem(), c.dtype == FLASH4_DTYPE_BF16 ? ref::Precision::bf16
                                                                                          : ref::Precision::fp16,
                                                seed));
    ASSERT_TRUE(device.forward());
    std::vector<std::uint16_t> first;
    std::vector<float> first_dsink;
    for (int run = 0; run < kRuns; ++run) {
      const flash4_status status = device.backward();
      ASSERT_EQ(status, FLASH4_SUCCESS) << flash4_status_string(status) << ": " << flash4_last_error_message();
      FLASH4_CUDA_OK(cudaDeviceSynchronize());
      const std::vector<float> dsink = device.dsink();
      if (run == 0) {
        first = device.gradient_bits();
        first_dsink = dsink;
        for (float x : dsink) ASSERT_TRUE(std::isfinite(x) && x != 0.0f) << "dsink " << x << " in the first run";
        ASSERT_TRUE(device.untouched());
        continue;
      }
      if (deterministic) {
        ASSERT_EQ(device.gradient_bits(), first) << "run " << run << " differs from run 0";
      } else {
        for (std::size_t h = 0; h < dsink.size(); ++h) {
          ASSERT_EQ(std::bit_cast<std::uint32_t>(dsink[h]), std::bit_cast<std::uint32_t>(first_dsink[h]))
              << "dsink of head " << h << ", run " << run;
        }
      }
    }
  }
}

}  // namespace
}  // namespace flash4::test
