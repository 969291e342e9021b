// Backward kernel against the fp64 reference (tolerance rule of tests/tolerance.hpp) over head dims x dtypes x
// masks (none, causal, window) x MHA/GQA 4:1/MQA x odd sequence lengths x Sq != Sk x varlen with empty sequences
// x softcap x strided tensors, with poisoned gradients inside guard regions; then determinism (100 runs, bit
// for bit) and the workspace contract. Only the backward kernels compiled into this build are instantiated
// (FLASH4_FOR_EACH_BUILT_BWD_KERNEL); for those, any status but success is a failure. Head dims left out of
// the build must say so with FLASH4_ERROR_NO_KERNEL.
//
// The cost is the CPU reference (fp64 and naive, forward and backward: about 14 x B x Hq x visible(Sq x Sk) x D
// multiply-adds a case, 15-20 ns per visible pair x D on a shared 2-core machine), so every kernel gets the small
// grid and only the main configuration (bf16, D = 128) the long sequences: about 250 CPU-seconds for the 400
// cases of a full build, the longest case (4224 x 4224 causal) under 20 s.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "flash4/flash4.hpp"
#include "gpu/backward_case.hpp"
#include "gpu/built_kernel_list.hpp"
#include "gpu/gpu_available.hpp"
#include "launch/bwd_tile_config.hpp"

namespace flash4::test {
namespace {

std::vector<BuiltKernel> built_kernels() { return built_backward_kernels(); }

bool is_main(const BuiltKernel& kernel) { return kernel.dtype == FLASH4_DTYPE_BF16 && kernel.head_dim == 128; }

BuiltKernel main_kernel() { return main_of(built_kernels()); }

// Sequence lengths from the FA3/FA4 test suites: tails of every size around the 128-row tiles.
const std::vector<int> kOddLengths = {1, 17, 113, 239, 799};

enum class Mask { none, causal, window };

BackwardCase with_mask(BackwardCase c, Mask mask) {
  c.causal = mask == Mask::causal;
  if (mask == Mask::window) {
    c.window_left = 64;
    c.window_right = 32;
  }
  return c;
}

std::vector<BackwardCase> backward_grid() {
  std::vector<BackwardCase> cases;
  for (const BuiltKernel& kernel : built_kernels()) {
    BackwardCase base;
    base.dtype = kernel.dtype;
    base.head_dim = kernel.head_dim;
    for (int length : kOddLengths) {
      for (Mask mask : {Mask::none, Mask::causal}) {
        BackwardCase c = with_mask(base, mask);
        c.seqlen_q = c.seqlen_k = length;
        cases.push_back(c);
      }
    }
    BackwardCase long_causal = with_mask(base, Mask::causal);
    long_causal.seqlen_q = long_causal.seqlen_k = 1023;
    cases.push_back(long_causal);
    // Sq != Sk both ways, causal bottom-right (Sq > Sk leaves fully masked top rows: dq = 0 there).
    for (auto [sq, sk] : {std::pair{113, 203}, std::pair{239, 1}, std::pair{799, 3}, std::pair{300, 128}}) {
      for (Mask mask : {Mask::none, Mask::causal}) {
        BackwardCase c = with_mask(base, mask);
        c.seqlen_q = sq;
        c.seqlen_k = sk;
        cases.push_back(c);
      }
    }
    // Every mask with every head layout: MHA, GQA 4:1 and MQA (dk/dv summed over the group), batch 2.
    for (auto [heads_q, heads_kv] : {std::pair{2, 2}, std::pair{8, 2}, std::pair{4, 1}}) {
      for (Mask mask : {Mask::none, Mask::causal, Mask::window}) {
        BackwardCase c = with_mask(base, mask);
        c.batch = 2;
        c.heads_q = heads_q;
        c.heads_kv = heads_kv;
        c.seqlen_q = c.seqlen_k = 257;
        cases.push_back(c);
      }
    }
    // The deterministic path (its own reduction order) against the reference too: GQA, causal.
    BackwardCase deterministic = with_mask(base, Mask::causal);
    deterministic.batch = 2;
    deterministic.heads_q = 8;
    deterministic.heads_kv = 2;
    deterministic.seqlen_q = deterministic.seqlen_k = 257;
    deterministic.deterministic = true;
    cases.push_back(deterministic);
    // More windows: both sides bounded at Sq = Sk, and right-only at Sq < Sk (keys no query sees: dk = dv = 0).
    for (auto [sq, left, right] : {std::tuple{600, 100, 37}, std::tuple{400, -1, 50}}) {
      BackwardCase c = base;
      c.seqlen_q = sq;
      c.seqlen_k = 600;
      c.window_left = left;
      c.window_right = right;
      cases.push_back(c);
    }
    // Softcap, causal MHA and non-causal GQA with Sq != Sk.
    BackwardCase capped = base;
    capped.seqlen_q = capped.seqlen_k = 333;
    capped.softcap = 30.0f;
    capped.causal = true;
    cases.push_back(capped);
    capped.causal = false;
    capped.seqlen_q = 200;
    capped.heads_q = 8;
    capped.heads_kv = 2;
    capped.softcap = 5.0f;  // small enough to bend the scores of unit-normal inputs
    cases.push_back(capped);
    // Varlen with an empty query sequence and an empty key sequence, GQA, causal and not.
    for (bool causal : {false, true}) {
      BackwardCase c = base;
      c.varlen_q = {100, 0, 300, 7};
      c.varlen_k = {120, 5, 300, 0};
      c.heads_q = 4;
      c.heads_kv = 2;
      c.causal = causal;
      cases.push_back(c);
    }
    // Non-contiguous tensors (padded head, row and batch strides), fixed length and varlen.
    BackwardCase strided = base;
    strided.batch = 2;
    strided.seqlen_q = 200;
    strided.seqlen_k = 231;
    strided.heads_q = 4;
    strided.heads_kv = 2;
    strided.strided = true;
    cases.push_back(strided);
    strided.varlen_q = {50, 0, 129};
    strided.varlen_k = {64, 17, 140};
    strided.causal = true;
    strided.window_left = 80;
    cases.push_back(strided);
    // Split by key columns (96-key blocks, 48 keys per warpgroup): key blocks ending at, just before and
    // just after the second warpgroup's first key, a last block whose second warpgroup has no key, causal
    // diagonals crossing both warpgroups of a block at 64-row query blocks, under GQA and in deterministic
    // mode (each dQ chunk reduce-added by either warpgroup, alternating by step).
    if (bwd_tile_config(kernel.head_dim).split == BwdSplit::kKeyColumns) {
      const int keys = bwd_tile_config(kernel.head_dim).keys_per_warpgroup();
      for (int sk : {keys, keys - 1, keys + 1, 2 * keys, 3 * keys + 5}) {
        for (Mask mask : {Mask::none, Mask::causal}) {
          BackwardCase c = with_mask(base, mask);
          c.seqlen_q = 130;
          c.seqlen_k = sk;
          c.heads_q = 4;
          c.heads_kv = 2;
          cases.push_back(c);
        }
      }
      BackwardCase c = with_mask(base, Mask::causal);
      c.seqlen_q = 2 * keys + 64;
      c.seqlen_k = 4 * keys + 32;
      c.heads_q = 6;
      c.heads_kv = 2;
      c.deterministic = true;
      cases.push_back(c);
      c = with_mask(base, Mask::window);
      c.seqlen_q = c.seqlen_k = 5 * keys + 7;
      c.heads_q = 2;
      c.heads_kv = 1;
      c.deterministic = true;
      cases.push_back(c);
      // More tiles than SMs (2 key blocks x 140 heads), so every CTA runs several: the P^T rows reused for
      // one tile's dK / dV and the next tile's P^T, the stage ring, the K / V phases and the step parity that
      // picks each dQ chunk's warpgroup all carry across tiles; deterministic too; and a window far behind
      // the queries (Sq < Sk) gives key blocks no query sees, tiles without steps between tiles with steps.
      for (bool deterministic : {false, true}) {
        c = with_mask(base, deterministic ? Mask::causal : Mask::none);
        c.seqlen_q = 130;
        c.seqlen_k = 150;
        c.heads_q = c.heads_kv = 140;
        c.deterministic = deterministic;
        cases.push_back(c);
      }
      c = with_mask(base, Mask::window);
      c.seqlen_q = 40;
      c.seqlen_k = 3 * keys + 12;
      c.heads_q = c.heads_kv = 140;
      cases.push_back(c);
    }
  }
  // Long sequences for the main configuration only (the CPU reference is the slow part).
  for (const BuiltKernel& kernel : built_kernels()) {
    if (!is_main(kernel)) continue;
    BackwardCase base;
    base.head_dim = kernel.head_dim;
    base.heads_q = base.heads_kv = 1;
    for (auto [sq, sk, mask] : {std::tuple{1023, 1023, Mask::none}, std::tuple{1023, 1024, Mask::causal},
                                std::tuple{4224, 4224, Mask::causal}, std::tuple{4224, 4224, Mask::window}}) {
      BackwardCase c = with_mask(base, mask);
      c.seqlen_q = sq;
      c.seqlen_k = sk;
      cases.push_back(c);
    }
    // MQA over a long sequence: dk/dv sum 4 heads x 2048 rows; and varlen in deterministic mode.
    BackwardCase mqa = with_mask(base, Mask::causal);
    mqa.seqlen_q = mqa.seqlen_k = 2048;
    mqa.heads_q = 4;
    cases.push_back(mqa);
    BackwardCase varlen = with_mask(base, Mask::causal);
    varlen.varlen_q = {700, 0, 1, 333};
    varlen.varlen_k = {900, 64, 0, 333};
    varlen.heads_q = 4;
    varlen.heads_kv = 2;
    varlen.deterministic = true;
    cases.push_back(varlen);
    // Deterministic mode where query blocks see few key blocks or none: Sq > Sk under the causal mask (the
    // first rows see no key), and a window bounded on both sides with Sq < Sk under GQA.
    BackwardCase few = with_mask(base, Mask::causal);
    few.seqlen_q = 700;
    few.seqlen_k = 300;
    few.deterministic = true;
    cases.push_back(few);
    few = base;
    few.seqlen_q = 300;
    few.seqlen_k = 900;
    few.window_left = 100;
    few.window_right = 50;
    few.heads_q = 4;
    few.deterministic = true;
    cases.push_back(few);
    // More (query head, sequence) pairs than a grid's y dimension holds: the pre- and postprocess stride
    // over them.
    BackwardCase many = base;
    many.batch = 66000;
    many.seqlen_q = 1;
    many.seqlen_k = 3;
    cases.push_back(many);
  }
  return cases;
}

class BackwardGrid : public ::testing::TestWithParam<BackwardCase> {};

TEST_P(BackwardGrid, MatchesReference) {
  FLASH4_REQUIRE_GPU();
  expect_matches_reference(run_backward_case(GetParam()));
}

INSTANTIATE_TEST_SUITE_P(Sm90, BackwardGrid, ::testing::ValuesIn(backward_grid()),
                         [](const ::testing::TestParamInfo<BackwardCase>& info) {
                           return test_name(info.param, info.index);
                         });

ref::Precision precision_of(flash4_dtype dtype) {
  return dtype == FLASH4_DTYPE_BF16 ? ref::Precision::bf16 : ref::Precision::fp16;
}

// deterministic = 1: the same inputs give the same dq, dk and dv bits, run after run (the gradients are poisoned
// before every run, so each run writes them all again).
constexpr int kDeterminismRuns = 100;

// The main kernel (split by keys: the dQ writer warps order the bulk reduce-adds) and, when built, a head
// dim split by key columns and one split by roles (the consumers order their own reductions).
std::vector<BackwardCase> determinism_cases() {
  std::vector<BackwardCase> cases;
  auto add = [&cases](const BuiltKernel& kernel, int heads) {
    BackwardCase causal;
    causal.dtype = kernel.dtype;
    causal.head_dim = kernel.head_dim;
    causal.batch = 2;
    causal.seqlen_q = causal.seqlen_k = 1024;
    causal.heads_q = causal.heads_kv = heads;
    causal.causal = true;
    causal.deterministic = true;
    BackwardCase gqa = causal;
    gqa.causal = false;
    gqa.heads_kv = heads / 4;
    cases.push_back(causal);
    cases.push_back(gqa);
  };
  add(main_kernel(), 16);
  for (BwdSplit split : {BwdSplit::kKeyColumns, BwdSplit::kRoles}) {
    for (const BuiltKernel& kernel : built_kernels()) {
      if (bwd_tile_config(kernel.head_dim).split == split) {
        add(kernel, 8);
        break;
      }
    }
  }
  return cases;
}

class BackwardDeterminism : public ::testing::TestWithParam<BackwardCase> {};

TEST_P(BackwardDeterminism, BitIdenticalOverRuns) {
  FLASH4_REQUIRE_GPU();
  const BackwardCase& c = GetParam();
  const std::uint64_t seed = ref::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  BackwardDevice device(c, ref::random_inputs(c.problem(), precision_of(c.dtype), seed));
  ASSERT_TRUE(device.forward());
  std::vector<std::uint16_t> first;
  for (int run = 0; run < kDeterminismRuns; ++run) {
    const flash4_status status = device.backward();
    ASSERT_EQ(status, FLASH4_SUCCESS) << flash4_status_string(status) << ": " << flash4_last_error_message();
    FLASH4_CUDA_OK(cudaDeviceSynchronize());
    if (run == 0) {
      first = device.gradient_bits();
      // Identical garbage would pass the comparison: the first run's gradients must be finite everywhere.
      for (const std::vector<float>& gradient : {device.dq(), device.dk(), device.dv()}) {
        for (float x : gradient) ASSERT_TRUE(std::isfinite(x)) << "a non-finite gradient in the first run";
      }
      ASSERT_TRUE(device.untouched());
      continue;
    }
    const std::vector<std::uint16_t> bits = device.gradient_bits();
    ASSERT_EQ(bits.size(), first.size());
    for (std::size_t e = 0; e < bits.size(); ++e) {
      ASSERT_EQ(bits[e], first[e]) << "run " << run << " differs from run 0 at element " << e
                                   << " of the dq, dk, dv buffers (guards included)";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Sm90, BackwardDeterminism, ::testing::ValuesIn(determinism_cases()),
                         [](const ::testing::TestParamInfo<BackwardCase>& info) {
                           return test_name(info.param, info.index);
                         });

// A workspace below flash4_bwd_workspace_size is refused before anything is launched, with a message.
TEST(BackwardWorkspace, TooSmallIsRefusedWithAMessage) {
  FLASH4_REQUIRE_GPU();
  const BuiltKernel kernel = main_kernel();
  BackwardCase c;
  c.dtype = kernel.dtype;
  c.head_dim = kernel.head_dim;
  c.seqlen_q = c.seqlen_k = 300;
  c.heads_q = 4;
  c.heads_kv = 2;
  c.causal = true;
  BackwardDevice device(c, ref::random_inputs(c.problem(), precision_of(c.dtype)));
  ASSERT_TRUE(device.forward());
  const flash4_bwd_params params = device.bwd_params();
  std::size_t needed = 0;
  ASSERT_EQ(flash4_bwd_workspace_size(&params, &needed), FLASH4_SUCCESS) << flash4_last_error_message();
  if (needed == 0) GTEST_SKIP() << "flash4_bwd_workspace_size is 0 for this problem: no workspace is too small";

  for (const std::size_t given : {needed - 1, std::size_t{0}}) {
    SCOPED_TRACE("workspace of " + std::to_string(given) + " bytes, " + std::to_string(needed) + " needed");
    const flash4_status status = device.backward(given);
    const std::string message = flash4_last_error_message();
    // 0 bytes is passed as a NULL workspace, which may also be reported as the NULL pointer it is.
    if (given == 0 && status == FLASH4_ERROR_NULL_POINTER) {
      EXPECT_NE(message.find("workspace"), std::string::npos) << message;
    } else {
      EXPECT_EQ(status, FLASH4_ERROR_INVALID_ARGUMENT) << flash4_status_string(status) << ": " << message;
      EXPECT_NE(message.find("workspace"), std::string::npos) << "the message should name the workspace: " << message;
    }
    FLASH4_CUDA_OK(cudaDeviceSynchronize());
    EXPECT_TRUE(device.untouched());
    for (const std::vector<float>& gradient : {device.dq(), device.dk(), device.dv()}) {
      for (float x : gradient) ASSERT_TRUE(std::isnan(x)) << "a refused call wrote a gradient";
    }
  }
}

// The C++ API (flash4::backward with an RAII Workspace) fills the same params as the C ABI: in deterministic mode
// both give the same bits.
TEST(BackwardCppApi, SameBitsAsTheCAbi) {
  FLASH4_REQUIRE_GPU();
  const BuiltKernel kernel = main_kernel();
  BackwardCase c;
  c.dtype = kernel.dtype;
  c.head_dim = kernel.head_dim;
  c.batch = 2;
  c.seqlen_q = 200;
  c.seqlen_k = 333;
  c.heads_q = 4;
  c.heads_kv = 2;
  c.causal = true;
  c.strided = true;
  c.deterministic = true;
  BackwardDevice device(c, ref::random_inputs(c.problem(), precision_of(c.dtype)));
  ASSERT_TRUE(device.forward());
  const flash4_status status = device.backward();
  ASSERT_EQ(status, FLASH4_SUCCESS) << flash4_last_error_message();
  FLASH4_CUDA_OK(cudaDeviceSynchronize());
  const std::vector<std::uint16_t> c_abi = device.gradient_bits();

  // Views of the very buffers the C ABI call used; the gradients are poisoned again first.
  const flash4_bwd_params p = device.bwd_params();
  const DType dtype = c.dtype == FLASH4_DTYPE_BF16 ? DType::bf16 : DType::fp16;
  const auto view = [&](const void* data, flash4_strides s, int seqlen, int heads) {
    return TensorView{const_cast<void*>(data), dtype, {c.batch, seqlen, heads, c.head_dim}, {s.batch, s.seq, s.head, 1}};
  };
  BackwardTensors tensors{.q = view(p.q, p.q_strides, c.seqlen_q, c.heads_q),
                          .k = view(p.k, p.k_strides, c.seqlen_k, c.heads_kv),
                          .v = view(p.v, p.v_strides, c.seqlen_k, c.heads_kv),
                          .o = view(p.o, p.o_strides, c.seqlen_q, c.heads_q),
                          .dout = view(p.dout, p.dout_strides, c.seqlen_q, c.heads_q),
                          .lse = p.lse,
                          .dq = view(p.dq, p.dq_strides, c.seqlen_q, c.heads_q),
                          .dk = view(p.dk, p.dk_strides, c.seqlen_k, c.heads_kv),
                          .dv = view(p.dv, p.dv_strides, c.seqlen_k, c.heads_kv)};
  for (const TensorView* gradient : {&tensors.dq, &tensors.dk, &tensors.dv}) {
    const std::size_t bytes = static_cast<std::size_t>(gradient->stride[0]) * c.batch * sizeof(std::uint16_t);
    FLASH4_CUDA_OK(cudaMemset(gradient->data, 0xFF, bytes));
  }
  AttnOptions options;
  options.softmax_scale = p.softmax_scale;
  options.causal = c.causal;
  options.deterministic = true;
  {
    Workspace workspace;
    const Status api = backward(tensors, options, nullptr, workspace);
    ASSERT_TRUE(api.ok()) << api.to_string();
    FLASH4_CUDA_OK(cudaDeviceSynchronize());
  }
  EXPECT_TRUE(c_abi == device.gradient_bits()) << "flash4::backward and flash4_bwd gave different gradients";
  EXPECT_TRUE(device.untouched());
}

// Every head dim has a backward, but a build may leave some out (FLASH4_HEAD_DIMS / FLASH4_DTYPES): a
// supported (dtype, head dim) that no built kernel is wide enough for answers FLASH4_ERROR_NO_KERNEL naming
// it, and writes nothing. (A narrower head dim is served by a wider kernel: host/kernel_choice.hpp.)
bool backward_built(flash4_dtype dtype, int head_dim) {
  for (const BuiltKernel& built : built_backward_kernels()) {
    if (built.dtype == dtype && built.head_dim >= head_dim) return true;
  }
  return false;
}

TEST(BackwardUnsupported, HeadDimsNotBuiltSaySo) {
  FLASH4_REQUIRE_GPU();
  int checked = 0;
  for (flash4_dtype dtype : {FLASH4_DTYPE_BF16, FLASH4_DTYPE_FP16}) {
    for (int head_dim : {64, 96, 128, 192, 256}) {
      if (backward_built(dtype, head_dim)) continue;
      ++checked;
      BackwardCase c;
      c.dtype = dtype;
      c.head_dim = head_dim;
      c.seqlen_q = c.seqlen_k = 100;
      BackwardDevice device(c, ref::random_inputs(c.problem(), precision_of(c.dtype)));
      const flash4_status status = device.backward();
      const std::string message = flash4_last_error_message();
      EXPECT_EQ(status, FLASH4_ERROR_NO_KERNEL) << flash4_status_string(status) << ": " << message;
      std::string kernel_name = "head_dim ";  // appended: GCC 12 warns falsely (-Wrestrict) on "..." + to_string
      kernel_name += std::to_string(head_dim);
      EXPECT_NE(message.find(kernel_name), std::string::npos) << message;
      FLASH4_CUDA_OK(cudaDeviceSynchronize());
      for (const std::vector<float>& gradient : {device.dq(), device.dk(), device.dv()}) {
        for (float x : gradient) ASSERT_TRUE(std::isnan(x)) << "a refused call wrote a gradient";
      }
    }
  }
  if (checked == 0) GTEST_SKIP() << "this build has every backward kernel (nothing left out to refuse)";
}

}  // namespace
}  // namespace flash4::test
