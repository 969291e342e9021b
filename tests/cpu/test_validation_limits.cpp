// Validation rules 6, 7, 11 and 12 of flash4.h through the C ABI: the size limits that keep the kernels' int32
// arithmetic exact, derived constants, and outputs that overlap themselves or share memory with another tensor.
// The findings of issue 28 (an adversarial test of the C ABI) are the first tests of each group.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cstdint>
#include <limits>

#include "cpu/validation_params.hpp"
#include "flash4/flash4.h"
#include "host/kernel_choice.hpp"

namespace flash4::validation_test {
namespace {

constexpr int32_t kInt32Max = std::numeric_limits<int32_t>::max();

// One query and key head of 128 dims: the shape of the examples.
flash4_bwd_params single_head_bwd() {
  flash4_bwd_params p = valid_bwd();
  p.heads_q = p.heads_kv = 1;
  p.q_strides = p.o_strides = p.dout_strides = p.dq_strides = contiguous(kSeqlenQ, 1);
  p.k_strides = p.v_strides = p.dk_strides = p.dv_strides = contiguous(kSeqlenK, 1);
  return p;
}

// Tensors of up to 2^40 bytes each, none overlapping another: for problems near the size limits.
void* far_pointer(int index) { return reinterpret_cast<void*>(static_cast<std::uintptr_t>(index + 1) << 40); }

void spread_out(flash4_fwd_params& p) {
  p.q = far_pointer(0);
  p.k = far_pointer(1);
  p.v = far_pointer(2);
  p.o = far_pointer(3);
  p.lse = static_cast<float*>(far_pointer(4));
}

void spread_out(flash4_bwd_params& p) {
  p.q = far_pointer(0);
  p.k = far_pointer(1);
  p.v = far_pointer(2);
  p.o = far_pointer(3);
  p.dout = far_pointer(4);
  p.lse = static_cast<float*>(far_pointer(5));
  p.dq = far_pointer(6);
  p.dk = far_pointer(7);
  p.dv = far_pointer(8);
}

// ---- finding 1: the backward's workspace ----------------------------------------------------------------

// max_seqlen_q = 2^31 - 1 over 258041 rows: the workspace was sized at 1 KiB, and flash4_bwd accepted it.
TEST(ValidationLimits, WorkspaceCoversTheDqAccumulatorWhateverMaxSeqlen) {
  flash4_bwd_params p = single_head_bwd();
  p.batch = 1;
  p.cu_seqlens_q = fake_device_pointer<const int32_t>(10);
  p.cu_seqlens_k = fake_device_pointer<const int32_t>(11);
  p.total_q = 258041;
  p.max_seqlen_q = kInt32Max;
  p.total_k = 1000;
  p.max_seqlen_k = 1000;
  spread_out(p);
  // A dtype this build has a kernel for: without one the size is 0 (the launch reports NO_KERNEL).
  const auto& built = host::built_backward_kernels();
  const auto serving =
      std::find_if(built.begin(), built.end(), [](const host::BuiltKernel& k) { return k.head_dim >= kHeadDim; });
  if (serving == built.end()) GTEST_SKIP() << "no backward kernel of head dim >= " << kHeadDim << " in this build";
  p.dtype = serving->dtype;
  std::size_t bytes = 0;
  ASSERT_EQ(flash4_bwd_workspace_size(&p, &bytes), FLASH4_SUCCESS) << last_error();
  EXPECT_GE(bytes, std::size_t{258041} * kHeadDim * sizeof(float)) << "smaller than the fp32 dQ accumulator";
}

// ---- finding 2: counts past int32 --------------------------------------------------------------------------

TEST(ValidationLimits, LengthsAboveTheLimitAreRejected) {
  flash4_fwd_params p = valid_fwd();
  p.batch = 1;
  p.heads_q = p.heads_kv = 1;
  p.seqlen_q = kInt32Max;  // (seqlen_q + 127) / 128 overflowed int in the forward planner: one CTA, O unwritten
  p.q_strides = p.o_strides = contiguous(1, 1);
  p.k_strides = p.v_strides = contiguous(kSeqlenK, 1);
  spread_out(p);
  expect_fwd_rejected(p, FLASH4_ERROR_SIZE_OVERFLOW, "seqlen_q is 2147483647");
  p.seqlen_q = FLASH4_MAX_SEQLEN;
  expect_fwd_valid(p);
  p.seqlen_q = FLASH4_MAX_SEQLEN + 1;
  expect_fwd_rejected(p, FLASH4_ERROR_SIZE_OVERFLOW, "seqlen_q");
  p = valid_fwd();
  make_varlen(p);
  p.heads_q = p.heads_kv = 1;
  p.total_k = FLASH4_MAX_SEQLEN + 1;
  p.max_seqlen_k = kInt32Max;
  expect_fwd_rejected(p, FLASH4_ERROR_SIZE_OVERFLOW, "total_k");
}

// Varlen grids are sized by the longest sequence: batch x heads x its 64-row blocks must stay <= 2^30.
TEST(ValidationLimits, BlocksOverEverySequenceAndHeadAreBounded) {
  flash4_fwd_params p = valid_fwd();
  make_varlen(p);
  p.batch = 1 << 16;
  p.heads_q = p.heads_kv = 16;
  p.total_q = p.max_seqlen_q = 1 << 20;  // 2^16 x 16 x 2^14 blocks = 2^34
  p.total_k = p.max_seqlen_k = 64;
  p.q_strides = p.o_strides = p.k_strides = p.v_strides = contiguous(1, 16);
  spread_out(p);
  expect_fwd_rejected(p, FLASH4_ERROR_SIZE_OVERFLOW, "max_seqlen_q: batch (65536) x heads_q (16)");
  p.max_seqlen_q = 1 << 10;  // 2^16 x 16 x 2^4 = 2^24 blocks
  expect_fwd_valid(p);
}

// A max_seqlen larger than all rows is bounded by them: accepted, and the blocks are counted from total_q.
TEST(ValidationLimits, MaxSeqlenAboveTheTotalIsBoundedByIt) {
  flash4_fwd_params p = valid_fwd();
  make_varlen(p);
  p.max_seqlen_q = p.max_seqlen_k = kInt32Max;
  expect_fwd_valid(p);
}

TEST(ValidationLimits, SpansPastTheAddressSpaceAreRejected) {
  flash4_fwd_params p = valid_fwd();
  p.q = reinterpret_cast<const void*>(std::uintptr_t{0} - 4096);
  expect_fwd_rejected(p, FLASH4_ERROR_SIZE_OVERFLOW, "q: its last byte");
  p = valid_fwd();
  p.lse = reinterpret_cast<float*>(std::uintptr_t{0} - 64);
  expect_fwd_rejected(p, FLASH4_ERROR_SIZE_OVERFLOW, "lse: its last byte");
}

// ---- finding 4: accepted but wrong -------------------------------------------------------------------------

TEST(ValidationLimits, VarlenTotalsAboveBatchTimesMaxSeqlenAreRejected) {
  flash4_fwd_params p = valid_fwd();
  make_varlen(p);
  p.total_q = kBatch * kSeqlenQ + 1;
  expect_fwd_rejected(p, FLASH4_ERROR_INVALID_VARLEN, "total_q is 257, more than batch (2) x max_seqlen_q (128)");
  p = valid_fwd();
  make_varlen(p);
  p.total_k = kBatch * kSeqlenK + 1;
  expect_fwd_rejected(p, FLASH4_ERROR_INVALID_VARLEN, "total_k");
}

TEST(ValidationLimits, DerivedConstantsMustBeFinite) {
  flash4_fwd_params p = valid_fwd();
  p.softmax_scale = FLT_MAX;  // FLT_MAX * log2(e) is inf
  expect_fwd_rejected(p, FLASH4_ERROR_INVALID_ARGUMENT, "softmax_scale");
  p.softmax_scale = FLT_MAX / 2;
  expect_fwd_valid(p);
  p = valid_fwd();
  p.softcap = 1e-45f;  // softmax_scale / softcap is inf
  expect_fwd_rejected(p, FLASH4_ERROR_INVALID_ARGUMENT, "softcap");
  p.softcap = FLT_MAX;  // softcap * log2(e) is inf
  expect_fwd_rejected(p, FLASH4_ERROR_INVALID_ARGUMENT, "softcap");
  p.softcap = 30.0f;
  p.softmax_scale = FLT_MAX;  // without softcap this overflows; with it only scale / softcap is derived
  expect_fwd_valid(p);
  flash4_bwd_params b = valid_bwd();
  b.softcap = 1e-45f;
  expect_bwd_rejected(b, FLASH4_ERROR_INVALID_ARGUMENT, "softcap");
}

// An O head stride of 8 with D = 128: heads written over each other.
TEST(ValidationLimits, OutputsThatOverlapThemselvesAreRejected) {
  flash4_fwd_params p = valid_fwd();
  p.o_strides.head = 8;
  expect_fwd_rejected(p, FLASH4_ERROR_INVALID_ARGUMENT, "o overlaps itself");
  p = valid_fwd();
  p.o_strides.seq = p.o_strides.batch;  // rows of one batch entry on top of each other
  expect_fwd_rejected(p, FLASH4_ERROR_INVALID_ARGUMENT, "o overlaps itself");
  flash4_bwd_params b = valid_bwd();
  b.dk_strides.seq = kHeadDim;  // the next row starts at the second kv head
  expect_bwd_rejected(b, FLASH4_ERROR_INVALID_ARGUMENT, "dk overlaps itself");
  // Inputs may: k broadcast over its rows (stride 8 rows onto one another) reads the same keys, wrongly or
  // not, without writing anything.
  p = valid_fwd();
  p.k_strides.seq = 8;
  expect_fwd_valid(p);
}

// Non-contiguous but distinct addresses pass: heads interleaved between rows, padding everywhere.
TEST(ValidationLimits, PaddedAndPermutedOutputsPass) {
  flash4_fwd_params p = valid_fwd();
  p.o_strides = {kSeqlenQ * kHeadsQ * 136 + 8, 136, kSeqlenQ * 136};  // (batch, seq, head) = permuted + padded
  expect_fwd_valid(p);
}

TEST(ValidationLimits, OutputsThatAliasAnInputAreRejected) {
  for (int input = 0; input < 3; ++input) {
    flash4_fwd_params p = valid_fwd();
    p.o = const_cast<void*>(input == 0 ? p.q : input == 1 ? p.k : p.v);
    const char* names[] = {"o overlaps q", "o overlaps k", "o overlaps v"};
    expect_fwd_rejected(p, FLASH4_ERROR_INVALID_ARGUMENT, names[input]);
  }
  flash4_fwd_params p = valid_fwd();
  p.o = offset_bytes(const_cast<void*>(p.q), 4096);  // starts inside q
  expect_fwd_rejected(p, FLASH4_ERROR_INVALID_ARGUMENT, "o overlaps q");
  p = valid_fwd();
  p.lse = static_cast<float*>(p.o);
  expect_fwd_rejected(p, FLASH4_ERROR_INVALID_ARGUMENT, "lse overlaps o");
  p = valid_fwd();
  make_varlen(p);
  p.o = const_cast<int32_t*>(p.cu_seqlens_k);
  expect_fwd_rejected(p, FLASH4_ERROR_INVALID_ARGUMENT, "o overlaps cu_seqlens_k");
  flash4_bwd_params b = valid_bwd();
  b.dq = const_cast<void*>(b.dout);
  expect_bwd_rejected(b, FLASH4_ERROR_INVALID_ARGUMENT, "dq overlaps dout");
  b = valid_bwd();
  b.dk = const_cast<float*>(b.lse);
  expect_bwd_rejected(b, FLASH4_ERROR_INVALID_ARGUMENT, "dk overlaps lse");
  b = valid_bwd();
  b.dv = b.dk;
  expect_bwd_rejected(b, FLASH4_ERROR_INVALID_ARGUMENT, "dv overlaps dk");
}

// Inputs may share memory: q, k and v as views of one packed (B, S, 3, H, D) tensor.
TEST(ValidationLimits, PackedInputsPass) {
  flash4_fwd_params p = valid_fwd();
  p.seqlen_k = kSeqlenQ;
  p.heads_kv = kHeadsQ;
  const flash4_strides packed = {int64_t{kSeqlenQ} * 3 * kHeadsQ * kHeadDim, 3 * kHeadsQ * kHeadDim, kHeadDim};
  p.q_strides = p.k_strides = p.v_strides = packed;
  p.k = offset_bytes(p.q, kHeadsQ * kHeadDim * 2);
  p.v = offset_bytes(p.q, 2 * kHeadsQ * kHeadDim * 2);
  expect_fwd_valid(p);
}

// Tensors without rows are never touched, so they overlap nothing.
TEST(ValidationLimits, EmptyTensorsOverlapNothing) {
  flash4_bwd_params b = valid_bwd();
  b.seqlen_k = 0;
  b.dk = b.dv = const_cast<void*>(b.q);
  EXPECT_EQ(flash4_bwd_check(&b), FLASH4_SUCCESS) << last_error();
}

}  // namespace
}  // namespace flash4::validation_test
