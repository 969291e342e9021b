// Head dims other than the kernels' own, and v's head dim apart from q's (head_dim_v): which ones validation
// accepts (rule 3 of flash4.h), the first params layout that lacks head_dim_v, the memory rules sized by each
// tensor's own head dim, which built kernel serves a call (host/kernel_choice.hpp), and what the planners and
// the empty-problem fills take from it. No GPU: nothing here launches.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "cpu/validation_params.hpp"
#include "flash4/flash4.h"
#include "host/bwd_planner.hpp"
#include "host/empty_problem.hpp"
#include "host/kernel_choice.hpp"
#include "host/planner.hpp"

namespace flash4::validation_test {
namespace {

// A forward of head dims (d, dv) with contiguous tensors of those widths.
flash4_fwd_params fwd_with_dims(int d, int dv) {
  flash4_fwd_params p = valid_fwd();
  p.head_dim = d;
  p.head_dim_v = dv;
  p.q_strides = contiguous(kSeqlenQ, kHeadsQ, d);
  p.k_strides = contiguous(kSeqlenK, kHeadsKv, d);
  p.v_strides = contiguous(kSeqlenK, kHeadsKv, dv);
  p.o_strides = contiguous(kSeqlenQ, kHeadsQ, dv);
  return p;
}

flash4_bwd_params bwd_with_dims(int d, int dv) {
  flash4_bwd_params p = valid_bwd();
  p.head_dim = d;
  p.head_dim_v = dv;
  p.q_strides = p.dq_strides = contiguous(kSeqlenQ, kHeadsQ, d);
  p.k_strides = p.dk_strides = contiguous(kSeqlenK, kHeadsKv, d);
  p.v_strides = p.dv_strides = contiguous(kSeqlenK, kHeadsKv, dv);
  p.o_strides = p.dout_strides = contiguous(kSeqlenQ, kHeadsQ, dv);
  return p;
}

TEST(HeadDims, EveryPairOfMultiplesOfEightPasses) {
  for (int d = 8; d <= 256; d += 8) {
    for (int dv : {8, 64, 128, 136, 256}) {
      SCOPED_TRACE("head_dim " + std::to_string(d) + " head_dim_v " + std::to_string(dv));
      const flash4_fwd_params fwd = fwd_with_dims(d, dv);
      EXPECT_EQ(flash4_fwd_check(&fwd), FLASH4_SUCCESS) << last_error();
      const flash4_bwd_params bwd = bwd_with_dims(d, dv);
      EXPECT_EQ(flash4_bwd_check(&bwd), FLASH4_SUCCESS) << last_error();
    }
  }
}

TEST(HeadDims, HeadDimVOtherThanZeroOrAMultipleOfEightIsRejected) {
  for (int dv : {-8, -1, 4, 12, 84, 129, 264}) {
    SCOPED_TRACE("head_dim_v " + std::to_string(dv));
    flash4_fwd_params fwd = valid_fwd();
    fwd.head_dim_v = dv;
    expect_fwd_rejected(fwd, FLASH4_ERROR_UNSUPPORTED_HEAD_DIM, "head_dim_v");
    expect_fwd_rejected(fwd, FLASH4_ERROR_UNSUPPORTED_HEAD_DIM, "a multiple of 8 in [8, 256]");
    flash4_bwd_params bwd = valid_bwd();
    bwd.head_dim_v = dv;
    expect_bwd_rejected(bwd, FLASH4_ERROR_UNSUPPORTED_HEAD_DIM, "head_dim_v");
  }
}

// A caller of the first layout passes its size, which ends where head_dim_v begins: the field is not read
// (whatever lies there) and counts as 0, equal to head_dim.
TEST(HeadDims, FirstLayoutReadsHeadDimVAsZero) {
  flash4_fwd_params fwd = valid_fwd();
  fwd.struct_size = offsetof(flash4_fwd_params, head_dim_v);
  fwd.head_dim_v = 5;  // past the caller's struct: never read
  EXPECT_EQ(flash4_fwd_check(&fwd), FLASH4_SUCCESS) << last_error();
  flash4_bwd_params bwd = valid_bwd();
  bwd.struct_size = offsetof(flash4_bwd_params, head_dim_v);
  bwd.head_dim_v = 5;
  EXPECT_EQ(flash4_bwd_check(&bwd), FLASH4_SUCCESS) << last_error();
  // The same values with the current size are read, and rejected.
  fwd.struct_size = sizeof(fwd);
  expect_fwd_rejected(fwd, FLASH4_ERROR_UNSUPPORTED_HEAD_DIM, "head_dim_v");
}

// Rule 12a sizes each tensor by its own head dim: an o (or dv) as wide as v passes with rows narrower than
// q's, and an output narrower than its head dim overlaps itself.
TEST(HeadDims, MemoryRulesUseEachTensorsHeadDim) {
  const flash4_fwd_params narrow_v = fwd_with_dims(192, 128);
  EXPECT_EQ(flash4_fwd_check(&narrow_v), FLASH4_SUCCESS) << last_error();
  flash4_fwd_params too_narrow_o = fwd_with_dims(128, 192);
  too_narrow_o.o_strides = contiguous(kSeqlenQ, kHeadsQ, 128);
  expect_fwd_rejected(too_narrow_o, FLASH4_ERROR_INVALID_ARGUMENT, "o overlaps itself");
  flash4_bwd_params too_narrow_dv = bwd_with_dims(128, 192);
  too_narrow_dv.dv_strides = contiguous(kSeqlenK, kHeadsKv, 128);
  expect_bwd_rejected(too_narrow_dv, FLASH4_ERROR_INVALID_ARGUMENT, "dv overlaps itself");
  flash4_bwd_params too_narrow_dk = bwd_with_dims(192, 128);
  too_narrow_dk.dk_strides = contiguous(kSeqlenK, kHeadsKv, 128);
  expect_bwd_rejected(too_narrow_dk, FLASH4_ERROR_INVALID_ARGUMENT, "dk overlaps itself");
  // Rows wider than the head dim (the padding a guard region or a packed tensor leaves) are fine.
  flash4_bwd_params padded = bwd_with_dims(40, 40);
  padded.dq_strides = contiguous(kSeqlenQ, kHeadsQ, 64);
  padded.dv_strides = contiguous(kSeqlenK, kHeadsKv, 48);
  EXPECT_EQ(flash4_bwd_check(&padded), FLASH4_SUCCESS) << last_error();
}

TEST(KernelChoice, SmallestBuiltHeadDimAtLeastTheNeededOne) {
  const std::vector<host::BuiltKernel> built = {{FLASH4_DTYPE_BF16, 192}, {FLASH4_DTYPE_BF16, 64},
                                                {FLASH4_DTYPE_BF16, 128}, {FLASH4_DTYPE_FP16, 256}};
  const struct {
    flash4_dtype dtype;
    int needed;
    int served_by;
  } cases[] = {{FLASH4_DTYPE_BF16, 8, 64},    {FLASH4_DTYPE_BF16, 64, 64},   {FLASH4_DTYPE_BF16, 72, 128},
               {FLASH4_DTYPE_BF16, 80, 128},  {FLASH4_DTYPE_BF16, 128, 128}, {FLASH4_DTYPE_BF16, 136, 192},
               {FLASH4_DTYPE_BF16, 192, 192}, {FLASH4_DTYPE_BF16, 200, 0},   {FLASH4_DTYPE_BF16, 256, 0},
               {FLASH4_DTYPE_FP16, 8, 256},   {FLASH4_DTYPE_FP16, 248, 256}};
  for (const auto& c : cases) {
    EXPECT_EQ(host::serving_head_dim(built, c.dtype, c.needed), c.served_by) << c.needed;
  }
}

TEST(KernelChoice, NeededHeadDimIsTheLargerOfTheTwo) {
  flash4_fwd_params p = fwd_with_dims(192, 128);
  EXPECT_EQ(host::needed_head_dim(p), 192);
  EXPECT_EQ(host::value_head_dim(p), 128);
  p = fwd_with_dims(64, 136);
  EXPECT_EQ(host::needed_head_dim(p), 136);
  p.head_dim_v = 0;
  EXPECT_EQ(host::needed_head_dim(p), 64);
  EXPECT_EQ(host::value_head_dim(p), 64);
}

// Every dim the build's kernels cover is served by the smallest of them >= it; the forward and backward lists
// agree (both are every built dtype and head dim).
TEST(KernelChoice, ThisBuildsKernels) {
  const auto forward = host::built_forward_kernels();
  const auto backward = host::built_backward_kernels();
  ASSERT_FALSE(forward.empty());
  ASSERT_EQ(forward.size(), backward.size());
  for (int needed = 8; needed <= 256; needed += 8) {
    int expected = 0;
    for (const host::BuiltKernel& k : forward) {
      if (k.dtype == FLASH4_DTYPE_BF16 && k.head_dim >= needed && (expected == 0 || k.head_dim < expected)) {
        expected = k.head_dim;
      }
    }
    EXPECT_EQ(host::serving_head_dim(forward, FLASH4_DTYPE_BF16, needed), expected) << needed;
    EXPECT_EQ(host::serving_head_dim(backward, FLASH4_DTYPE_BF16, needed), expected) << needed;
  }
}

// The largest bf16 head dim this build has, 0 when none.
int largest_built_bf16() {
  int largest = 0;
  for (const host::BuiltKernel& k : host::built_forward_kernels()) {
    if (k.dtype == FLASH4_DTYPE_BF16) largest = std::max(largest, k.head_dim);
  }
  return largest;
}

// A valid head dim wider than every built kernel is NO_KERNEL naming the dims, found before the workspace or
// the device is looked at (so this runs without a GPU).
TEST(KernelChoice, NoBuiltKernelWideEnoughIsNoKernel) {
  const int largest = largest_built_bf16();
  if (largest == 0 || largest == 256) GTEST_SKIP() << "this build has a bf16 kernel for every valid head dim";
  const int d = largest + 8;
  flash4_fwd_params fwd = fwd_with_dims(128, d);
  fwd.dtype = FLASH4_DTYPE_BF16;
  ASSERT_EQ(flash4_fwd_check(&fwd), FLASH4_SUCCESS) << last_error();
  expect_status(flash4_fwd(&fwd, nullptr), FLASH4_ERROR_NO_KERNEL, "head_dim_v " + std::to_string(d), "flash4_fwd");
  flash4_bwd_params bwd = bwd_with_dims(d, 64);
  bwd.dtype = FLASH4_DTYPE_BF16;
  std::size_t bytes = 1;
  ASSERT_EQ(flash4_bwd_workspace_size(&bwd, &bytes), FLASH4_SUCCESS) << last_error();
  EXPECT_EQ(bytes, 0u);
  expect_status(flash4_bwd(&bwd, nullptr), FLASH4_ERROR_NO_KERNEL, "head_dim " + std::to_string(d), "flash4_bwd");
}

// The backward's workspace holds the serving kernel's dQ accumulator: the same bytes as a call of that
// kernel's own head dim.
TEST(KernelChoice, BackwardWorkspaceIsTheServingKernels) {
  for (int d : {8, 40, 72, 136, 200}) {
    const int kernel = host::serving_head_dim(host::built_backward_kernels(), FLASH4_DTYPE_BF16, d);
    if (kernel == 0) continue;
    SCOPED_TRACE("head_dim " + std::to_string(d) + " served by " + std::to_string(kernel));
    flash4_bwd_params p = bwd_with_dims(d, d);
    p.dtype = FLASH4_DTYPE_BF16;
    flash4_bwd_params own = bwd_with_dims(kernel, kernel);
    own.dtype = FLASH4_DTYPE_BF16;
    std::size_t bytes = 0, own_bytes = 0;
    ASSERT_EQ(flash4_bwd_workspace_size(&p, &bytes), FLASH4_SUCCESS) << last_error();
    ASSERT_EQ(flash4_bwd_workspace_size(&own, &own_bytes), FLASH4_SUCCESS) << last_error();
    EXPECT_EQ(bytes, own_bytes);
    EXPECT_EQ(bytes, host::plan_backward(p, kernel).workspace.total);
    EXPECT_EQ(host::plan_backward(p, kernel).tile.head_dim, kernel);
  }
}

TEST(KernelChoice, ForwardPlanTakesTheServingKernelsTiles) {
  const flash4_fwd_params p = fwd_with_dims(72, 72);
  const host::DeviceInfo device{0, 132, std::size_t{50} << 20, 9, 0};
  EXPECT_EQ(host::plan_forward(p, device, 128).tile.head_dim, 128);
  EXPECT_EQ(host::plan_forward(p, device, 96).tile.head_dim, 96);
}

// The fills of an empty problem write each tensor's own columns only.
TEST(HeadDims, EmptyProblemFillsStopAtEachTensorsHeadDim) {
  flash4_fwd_params fwd = fwd_with_dims(192, 128);
  fwd.seqlen_k = 0;
  const host::FillPlan fwd_plan = host::empty_problem_fills(fwd);
  ASSERT_EQ(fwd_plan.zeros.size(), 1u);
  EXPECT_EQ(fwd_plan.zeros[0].extent[3], 128);
  flash4_bwd_params no_keys = bwd_with_dims(40, 72);
  no_keys.seqlen_k = 0;
  const host::FillPlan dq_plan = host::empty_problem_fills(no_keys);
  ASSERT_EQ(dq_plan.zeros.size(), 1u);
  EXPECT_STREQ(dq_plan.zeros[0].name, "dq");
  EXPECT_EQ(dq_plan.zeros[0].extent[3], 40);
  flash4_bwd_params no_queries = bwd_with_dims(40, 72);
  no_queries.seqlen_q = 0;
  const host::FillPlan dkdv_plan = host::empty_problem_fills(no_queries);
  ASSERT_EQ(dkdv_plan.zeros.size(), 2u);
  EXPECT_EQ(dkdv_plan.zeros[0].extent[3], 40);  // dk
  EXPECT_EQ(dkdv_plan.zeros[1].extent[3], 72);  // dv
}

}  // namespace
}  // namespace flash4::validation_test
