// Validation of the fields appended after the first params layout: learnable sinks (sink, dsink) and
// seqused_q / seqused_k. Through the C ABI as in test_validation.cpp: each bad value is rejected by every
// entry point with its status and a message naming the argument; a caller of the first layout is accepted
// and its struct's bytes past that layout are never read.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "cpu/validation_params.hpp"
#include "flash4/flash4.h"

namespace flash4::validation_test {
namespace {

constexpr int kSinkSlot = 12;
constexpr int kDsinkSlot = 13;
constexpr int kSequsedQSlot = 14;
constexpr int kSequsedKSlot = 15;

flash4_fwd_params fwd_with_all() {
  flash4_fwd_params p = valid_fwd();
  p.sink = fake_device_pointer<const float>(kSinkSlot);
  p.seqused_q = fake_device_pointer<const int32_t>(kSequsedQSlot);
  p.seqused_k = fake_device_pointer<const int32_t>(kSequsedKSlot);
  return p;
}

flash4_bwd_params bwd_with_all() {
  flash4_bwd_params p = valid_bwd();
  p.sink = fake_device_pointer<const float>(kSinkSlot);
  p.dsink = fake_device_pointer<float>(kDsinkSlot);
  p.seqused_q = fake_device_pointer<const int32_t>(kSequsedQSlot);
  p.seqused_k = fake_device_pointer<const int32_t>(kSequsedKSlot);
  return p;
}

void expect_bwd_valid(const flash4_bwd_params& p) { EXPECT_EQ(flash4_bwd_check(&p), FLASH4_SUCCESS) << last_error(); }

TEST(SinkValidation, SinksAndSequsedPassFixedLengthAndVarlen) {
  flash4_fwd_params fwd = fwd_with_all();
  expect_fwd_valid(fwd);
  make_varlen(fwd);
  expect_fwd_valid(fwd);
  expect_bwd_valid(bwd_with_all());
}

// The first layout ends where head_dim_v starts: such a caller is accepted, and whatever lies past its
// struct_size (here invalid pointers) is not read.
TEST(SinkValidation, FirstLayoutIsAcceptedAndReadsNothingPastIt) {
  flash4_fwd_params fwd = fwd_with_all();
  fwd.struct_size = offsetof(flash4_fwd_params, head_dim_v);
  fwd.sink = offset_bytes(fwd.sink, 1);
  EXPECT_EQ(flash4_fwd_check(&fwd), FLASH4_SUCCESS) << last_error();
  flash4_bwd_params bwd = bwd_with_all();
  bwd.struct_size = offsetof(flash4_bwd_params, head_dim_v);
  bwd.dsink = nullptr;  // sink set without dsink: an error, were it read
  expect_bwd_valid(bwd);
}

// Each int32 / fp32 array 4-byte aligned, in either direction.
TEST(SinkValidation, MisalignedArrays) {
  flash4_fwd_params p = fwd_with_all();
  p.seqused_k = offset_bytes(p.seqused_k, 2);
  expect_fwd_rejected(p, FLASH4_ERROR_MISALIGNED, "seqused_k");
  p = fwd_with_all();
  p.sink = offset_bytes(p.sink, 2);
  expect_fwd_rejected(p, FLASH4_ERROR_MISALIGNED, "sink");
  flash4_bwd_params b = bwd_with_all();
  b.seqused_q = offset_bytes(b.seqused_q, 1);
  expect_bwd_rejected(b, FLASH4_ERROR_MISALIGNED, "seqused_q");
  b = bwd_with_all();
  b.dsink = offset_bytes(b.dsink, 2);
  expect_bwd_rejected(b, FLASH4_ERROR_MISALIGNED, "dsink");
}

TEST(SinkValidation, BackwardNeedsDsinkExactlyWithSink) {
  flash4_bwd_params b = bwd_with_all();
  b.dsink = nullptr;
  expect_bwd_rejected(b, FLASH4_ERROR_NULL_POINTER, "dsink");
  b = bwd_with_all();
  b.sink = nullptr;
  expect_bwd_rejected(b, FLASH4_ERROR_INVALID_ARGUMENT, "dsink");
}

// dsink is an output (rule 12): it may share memory with no input (sink, lse, seqused) and no other output.
TEST(SinkValidation, DsinkOverlappingAnInputOrOutput) {
  flash4_bwd_params b = bwd_with_all();
  b.dsink = const_cast<float*>(b.sink) + 1;  // within sink's heads_q floats
  expect_bwd_rejected(b, FLASH4_ERROR_INVALID_ARGUMENT, "dsink overlaps sink");
  b = bwd_with_all();
  b.dsink = static_cast<float*>(b.dv);
  expect_bwd_rejected(b, FLASH4_ERROR_INVALID_ARGUMENT, "dsink overlaps dv");
  b = bwd_with_all();
  b.dsink = reinterpret_cast<float*>(const_cast<int32_t*>(b.seqused_k));
  expect_bwd_rejected(b, FLASH4_ERROR_INVALID_ARGUMENT, "dsink overlaps seqused_k");
}

// The forward's outputs may not overlap the new inputs either.
TEST(SinkValidation, OutputsOverlappingSinkOrSeqused) {
  flash4_fwd_params p = fwd_with_all();
  p.sink = offset_bytes(static_cast<const float*>(p.o), 64);
  expect_fwd_rejected(p, FLASH4_ERROR_INVALID_ARGUMENT, "o overlaps sink");
  p = fwd_with_all();
  p.seqused_q = reinterpret_cast<const int32_t*>(p.lse);
  expect_fwd_rejected(p, FLASH4_ERROR_INVALID_ARGUMENT, "lse overlaps seqused_q");
}

}  // namespace
}  // namespace flash4::validation_test
