// What an empty problem writes (host/empty_problem.hpp): which calls are empty, and which tensors the plan
// fills with what, over which extents and strides. The fills themselves run on the GPU
// (tests/gpu/test_empty_problem.cpp); the plan is pure host code.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <utility>
#include <string>

#include "flash4/flash4.h"
#include "host/empty_problem.hpp"

namespace {

using flash4::host::empty_problem_fills;
using flash4::host::FillPlan;
using flash4::host::is_empty_problem;
using flash4::host::ZeroFill;

constexpr int kBatch = 3;
constexpr int kSeqlenQ = 5;
constexpr int kSeqlenK = 7;
constexpr int kHeadsQ = 4;
constexpr int kHeadsKv = 2;
constexpr int kHeadDim = 64;

template <class T = void>
T* fake_pointer(int index) {
  return reinterpret_cast<T*>(std::uintptr_t{0x1000000} * (index + 1));
}

// Strides with padding, so that a plan that assumed contiguity would show.
flash4_strides padded(int seqlen, int heads) {
  const std::int64_t head = kHeadDim + 8;
  return {std::int64_t{seqlen + 1} * heads * head, heads * head, head};
}

flash4_fwd_params fwd(int seqlen_q, int seqlen_k) {
  flash4_fwd_params p{};
  p.struct_size = sizeof(p);
  p.q = fake_pointer(0);
  p.k = fake_pointer(1);
  p.v = fake_pointer(2);
  p.o = fake_pointer(3);
  p.lse = fake_pointer<float>(4);
  p.q_strides = p.o_strides = padded(kSeqlenQ, kHeadsQ);
  p.k_strides = p.v_strides = padded(kSeqlenK, kHeadsKv);
  p.batch = kBatch;
  p.seqlen_q = seqlen_q;
  p.seqlen_k = seqlen_k;
  p.heads_q = kHeadsQ;
  p.heads_kv = kHeadsKv;
  p.head_dim = kHeadDim;
  return p;
}

flash4_bwd_params bwd(int seqlen_q, int seqlen_k) {
  flash4_bwd_params p{};
  p.struct_size = sizeof(p);
  p.dq = fake_pointer(6);
  p.dk = fake_pointer(7);
  p.dv = fake_pointer(8);
  p.lse = fake_pointer<const float>(5);
  p.dq_strides = padded(kSeqlenQ, kHeadsQ);
  p.dk_strides = padded(kSeqlenK, kHeadsKv);
  p.dv_strides = {kHeadsKv * kHeadDim * 100, kHeadsKv * kHeadDim, kHeadDim};
  p.batch = kBatch;
  p.seqlen_q = seqlen_q;
  p.seqlen_k = seqlen_k;
  p.heads_q = kHeadsQ;
  p.heads_kv = kHeadsKv;
  p.head_dim = kHeadDim;
  return p;
}

template <class Params>
void make_varlen(Params& p, int total_q, int total_k) {
  p.cu_seqlens_q = fake_pointer<const std::int32_t>(10);
  p.cu_seqlens_k = fake_pointer<const std::int32_t>(11);
  p.max_seqlen_q = p.max_seqlen_k = 16;
  p.seqlen_q = p.seqlen_k = 99;  // ignored in varlen mode
  p.total_q = total_q;
  p.total_k = total_k;
}

void expect_zero_fill(const ZeroFill& f, const std::string& name, const void* data, std::int64_t batch,
                      std::int64_t rows, std::int64_t heads, const flash4_strides& strides) {
  SCOPED_TRACE(name);
  EXPECT_EQ(f.name, name);
  EXPECT_EQ(f.data, data);
  EXPECT_EQ(f.element_bytes, 2);
  EXPECT_EQ(f.extent[0], batch);
  EXPECT_EQ(f.extent[1], rows);
  EXPECT_EQ(f.extent[2], heads);
  EXPECT_EQ(f.extent[3], kHeadDim);
  if (batch > 1) {
    EXPECT_EQ(f.stride[0], strides.batch);
  }
  EXPECT_EQ(f.stride[1], strides.seq);
  EXPECT_EQ(f.stride[2], strides.head);
}

// ---- which calls are empty -------------------------------------------------------------------------------

TEST(EmptyProblem, NoQueryRowsOrNoKeyRowsIsEmpty) {
  EXPECT_FALSE(is_empty_problem(fwd(kSeqlenQ, kSeqlenK)));
  EXPECT_TRUE(is_empty_problem(fwd(0, kSeqlenK)));
  EXPECT_TRUE(is_empty_problem(fwd(kSeqlenQ, 0)));
  EXPECT_TRUE(is_empty_problem(fwd(0, 0)));
  EXPECT_FALSE(is_empty_problem(bwd(1, 1)));
  EXPECT_TRUE(is_empty_problem(bwd(0, 1)));
  EXPECT_TRUE(is_empty_problem(bwd(1, 0)));
}

TEST(EmptyProblem, VarlenEmptinessIsTheWholeCallsNotOneSequences) {
  // Varlen reads total_q / total_k and ignores seqlen_q / seqlen_k; an empty sequence inside a call with rows
  // is the kernel's to handle.
  flash4_fwd_params p = fwd(kSeqlenQ, kSeqlenK);
  make_varlen(p, 10, 12);
  EXPECT_FALSE(is_empty_problem(p));
  p.seqlen_q = p.seqlen_k = 0;
  EXPECT_FALSE(is_empty_problem(p)) << "seqlen_q / seqlen_k are ignored in varlen mode";
  make_varlen(p, 0, 12);
  EXPECT_TRUE(is_empty_problem(p));
  make_varlen(p, 10, 0);
  EXPECT_TRUE(is_empty_problem(p));
  flash4_bwd_params b = bwd(kSeqlenQ, kSeqlenK);
  make_varlen(b, 0, 12);
  EXPECT_TRUE(is_empty_problem(b));
}

// ---- forward --------------------------------------------------------------------------------------------

TEST(EmptyProblem, NonEmptyProblemHasNoFills) {
  EXPECT_TRUE(empty_problem_fills(fwd(kSeqlenQ, kSeqlenK)).empty());
  EXPECT_TRUE(empty_problem_fills(bwd(kSeqlenQ, kSeqlenK)).empty());
}

TEST(EmptyProblem, ForwardWithoutQueriesWritesNothing) {
  EXPECT_TRUE(empty_problem_fills(fwd(0, kSeqlenK)).empty());
  EXPECT_TRUE(empty_problem_fills(fwd(0, 0)).empty());
  flash4_fwd_params p = fwd(kSeqlenQ, kSeqlenK);
  make_varlen(p, 0, 0);
  EXPECT_TRUE(empty_problem_fills(p).empty());
}

TEST(EmptyProblem, ForwardWithoutKeysZeroesOAndSetsLseToMinusInfinity) {
  const flash4_fwd_params p = fwd(kSeqlenQ, 0);
  const FillPlan plan = empty_problem_fills(p);
  ASSERT_EQ(plan.zeros.size(), 1u);
  expect_zero_fill(plan.zeros[0], "o", p.o, kBatch, kSeqlenQ, kHeadsQ, p.o_strides);
  ASSERT_EQ(plan.floats.size(), 1u);
  EXPECT_EQ(plan.floats[0].data, p.lse);
  EXPECT_EQ(plan.floats[0].count, kBatch * kHeadsQ * kSeqlenQ) << "lse is (B, Hq, Sq) contiguous";
  EXPECT_TRUE(std::isinf(plan.floats[0].value) && plan.floats[0].value < 0);
}

TEST(EmptyProblem, ForwardWithoutKeysAndWithoutLseZeroesOnlyO) {
  flash4_fwd_params p = fwd(kSeqlenQ, 0);
  p.lse = nullptr;
  const FillPlan plan = empty_problem_fills(p);
  EXPECT_EQ(plan.zeros.size(), 1u);
  EXPECT_TRUE(plan.floats.empty());
}

TEST(EmptyProblem, VarlenForwardWithoutKeysFillsEveryPackedRow) {
  flash4_fwd_params p = fwd(kSeqlenQ, kSeqlenK);
  make_varlen(p, 11, 0);
  p.o_strides.batch = 0;  // ignored in varlen mode
  const FillPlan plan = empty_problem_fills(p);
  ASSERT_EQ(plan.zeros.size(), 1u);
  expect_zero_fill(plan.zeros[0], "o", p.o, 1, 11, kHeadsQ, p.o_strides);
  ASSERT_EQ(plan.floats.size(), 1u);
  EXPECT_EQ(plan.floats[0].count, 11 * kHeadsQ) << "lse is (Hq, total_q)";
}

// With sinks, a row without keys has LSE = its head's sink logit: each run of Sq (or total_q) floats takes the
// next head's value from the device array.
TEST(EmptyProblem, ForwardWithoutKeysSetsLseToTheSinks) {
  flash4_fwd_params p = fwd(kSeqlenQ, 0);
  p.sink = fake_pointer<const float>(20);
  FillPlan plan = empty_problem_fills(p);
  ASSERT_EQ(plan.floats.size(), 1u);
  EXPECT_EQ(plan.floats[0].per_head, p.sink);
  EXPECT_EQ(plan.floats[0].run, kSeqlenQ) << "lse is (B, Hq, Sq): a run of Sq rows per head";
  EXPECT_EQ(plan.floats[0].heads, kHeadsQ);
  make_varlen(p, 11, 0);
  plan = empty_problem_fills(p);
  ASSERT_EQ(plan.floats.size(), 1u);
  EXPECT_EQ(plan.floats[0].run, 11) << "lse is (Hq, total_q)";
}

// ---- backward -------------------------------------------------------------------------------------------

TEST(EmptyProblem, BackwardWithoutKeysZeroesDq) {
  const flash4_bwd_params p = bwd(kSeqlenQ, 0);
  const FillPlan plan = empty_problem_fills(p);
  ASSERT_EQ(plan.zeros.size(), 1u);
  expect_zero_fill(plan.zeros[0], "dq", p.dq, kBatch, kSeqlenQ, kHeadsQ, p.dq_strides);
  EXPECT_TRUE(plan.floats.empty());
}

TEST(EmptyProblem, BackwardWithoutQueriesZeroesDkAndDv) {
  const flash4_bwd_params p = bwd(0, kSeqlenK);
  const FillPlan plan = empty_problem_fills(p);
  ASSERT_EQ(plan.zeros.size(), 2u);
  expect_zero_fill(plan.zeros[0], "dk", p.dk, kBatch, kSeqlenK, kHeadsKv, p.dk_strides);
  expect_zero_fill(plan.zeros[1], "dv", p.dv, kBatch, kSeqlenK, kHeadsKv, p.dv_strides);
  EXPECT_TRUE(plan.floats.empty());
}

// No row passes a gradient to the sinks: dsink = 0 whichever side is empty, even with no rows at all.
TEST(EmptyProblem, BackwardZeroesDsink) {
  for (const auto& [seqlen_q, seqlen_k] : {std::pair{kSeqlenQ, 0}, std::pair{0, kSeqlenK}, std::pair{0, 0}}) {
    flash4_bwd_params p = bwd(seqlen_q, seqlen_k);
    p.sink = fake_pointer<const float>(20);
    p.dsink = fake_pointer<float>(21);
    const FillPlan plan = empty_problem_fills(p);
    ASSERT_EQ(plan.floats.size(), 1u);
    EXPECT_EQ(plan.floats[0].data, p.dsink);
    EXPECT_EQ(plan.floats[0].count, kHeadsQ);
    EXPECT_EQ(plan.floats[0].value, 0.0f);
    EXPECT_EQ(plan.floats[0].per_head, nullptr);
  }
}

TEST(EmptyProblem, BackwardWithoutAnyRowsWritesNothing) {
  EXPECT_TRUE(empty_problem_fills(bwd(0, 0)).empty());
  flash4_bwd_params p = bwd(kSeqlenQ, kSeqlenK);
  make_varlen(p, 0, 0);
  EXPECT_TRUE(empty_problem_fills(p).empty());
}

TEST(EmptyProblem, VarlenBackwardFillsPackedRows) {
  flash4_bwd_params p = bwd(kSeqlenQ, kSeqlenK);
  make_varlen(p, 0, 9);
  FillPlan plan = empty_problem_fills(p);
  ASSERT_EQ(plan.zeros.size(), 2u);
  expect_zero_fill(plan.zeros[0], "dk", p.dk, 1, 9, kHeadsKv, p.dk_strides);
  expect_zero_fill(plan.zeros[1], "dv", p.dv, 1, 9, kHeadsKv, p.dv_strides);
  make_varlen(p, 13, 0);
  plan = empty_problem_fills(p);
  ASSERT_EQ(plan.zeros.size(), 1u);
  expect_zero_fill(plan.zeros[0], "dq", p.dq, 1, 13, kHeadsQ, p.dq_strides);
}

}  // namespace
