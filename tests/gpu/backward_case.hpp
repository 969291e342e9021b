// One backward test case run end to end on the GPU: random inputs, flash4_fwd for O and LSE, random dout,
// poisoned dq/dk/dv inside guard regions, flash4_bwd through the C ABI, then dq, dk and dv against the fp64
// reference with the tolerance rule (O and LSE too). BackwardDevice is the device side on its own, for tests
// that call flash4_bwd directly (determinism, workspace size).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "flash4/flash4.h"
#include "reference/reference.hpp"

namespace flash4::test {

struct BackwardCase {
  flash4_dtype dtype = FLASH4_DTYPE_BF16;
  int head_dim = 128;
  int head_dim_v = 0;  // of v, o, dout, dv; 0: head_dim
  int batch = 1;
  int seqlen_q = 128;
  int seqlen_k = 128;
  int heads_q = 2;
  int heads_kv = 2;
  bool causal = false;
  int window_left = -1;
  int window_right = -1;
  float softcap = 0.0f;
  std::vector<int> varlen_q = {};  // per-sequence lengths; empty: fixed length
  std::vector<int> varlen_k = {};
  // Every tensor (inputs and outputs) a non-contiguous view: padding between heads, rows and batches, which
  // holds NaN in the inputs and must stay untouched in the outputs. The padding after each head's row reaches
  // the widest kernel's head dim, so that a kernel serving a narrower head dim that wrote past it would write
  // there (and not into the next head's row, where a later correct write could hide it).
  bool strided = false;
  bool deterministic = false;
  std::vector<float> sink = {};       // learnable sink logits, one per query head; empty: none
  std::vector<int> seqused_q = {};    // rows each sequence uses (one per sequence); empty: all
  std::vector<int> seqused_k = {};

  std::string name() const;
  ref::Problem problem() const;
};

// gtest prints parameters with this instead of dumping their bytes.
inline void PrintTo(const BackwardCase& c, std::ostream* os) { *os << c.name(); }

struct BackwardOutcome {
  // Set when flash4_bwd answered NOT_IMPLEMENTED or NO_KERNEL: the test skips with this reason.
  std::string unavailable;
  std::uint64_t seed = 0;  // of the random inputs, for replaying a failure
  ::testing::AssertionResult calls = ::testing::AssertionSuccess();  // flash4_fwd, flash4_bwd, CUDA
  ::testing::AssertionResult o = ::testing::AssertionSuccess();
  ::testing::AssertionResult lse = ::testing::AssertionSuccess();
  ::testing::AssertionResult dq = ::testing::AssertionSuccess();
  ::testing::AssertionResult dk = ::testing::AssertionSuccess();
  ::testing::AssertionResult dv = ::testing::AssertionSuccess();
  ::testing::AssertionResult dsink = ::testing::AssertionSuccess();  // with sinks
  // Rows past seqused: o, lse and dq of unused query rows and dk, dv of unused key rows keep their poison.
  ::testing::AssertionResult unused_rows = ::testing::AssertionSuccess();
  // Guard regions, padding of strided outputs, the workspace's tail, and the inputs flash4_bwd must not write.
  ::testing::AssertionResult untouched = ::testing::AssertionSuccess();
};

BackwardOutcome run_backward_case(const BackwardCase& c);

// Every check of an outcome passed (a built kernel that refuses the case fails too), traced with its seed.
void expect_matches_reference(const BackwardOutcome& outcome);

// The case's name() as a gtest parameter name (alphanumerics and '_'), made unique by its index.
std::string test_name(const BackwardCase& c, std::size_t index);

// The device side of one case: every tensor in its own buffer between poisoned guard regions, inputs uploaded,
// and the params of both directions pointing at them. Results come back as floats in the reference's dense
// layout.
class BackwardDevice {
 public:
  BackwardDevice(const BackwardCase& c, const ref::Inputs& inputs);
  ~BackwardDevice();
  BackwardDevice(const BackwardDevice&) = delete;
  BackwardDevice& operator=(const BackwardDevice&) = delete;

  // Enqueue on the legacy stream; a failure comes back with its status and message.
  ::testing::AssertionResult forward();
  // The status of flash4_bwd, after poisoning dq/dk/dv and the workspace; the workspace is
  // flash4_bwd_workspace_size's answer, or `workspace_bytes` when given.
  flash4_status backward(std::optional<std::size_t> workspace_bytes = std::nullopt);
  flash4_bwd_params bwd_params() const;  // workspace fields empty

  // After a synchronize: the tensors in the reference's dense layout. NaN where nothing was written.
  std::vector<float> o() const;
  std::vector<float> lse() const;
  std::vector<float> dq() const;
  std::vector<float> dk() const;
  std::vector<float> dv() const;
  std::vector<float> dsink() const;  // empty without sinks
  // The raw 16-bit patterns of dq, dk and dv (guards and padding included) and of dsink, for bit-exact
  // comparison.
  std::vector<std::uint16_t> gradient_bits() const;
  // Every element that is not part of a written tensor still holds its poison, and no input changed.
  ::testing::AssertionResult untouched() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace flash4::test
