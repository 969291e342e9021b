// Validation through the C ABI: every bad input is rejected with its own status and a message naming the
// argument, by flash4_*_check, flash4_*_workspace_size and flash4_fwd / flash4_bwd alike, before any CUDA call
// (so these tests need no GPU). Valid launches are not tested here: they need a device (an empty problem's fills
// are launches too; tests/gpu/test_empty_problem.cpp checks what they write).
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdio>
#include <cstdint>
#include <set>
#include <string>
#include <thread>

#include "built_kernels.hpp"
#include "cpu/validation_params.hpp"
#include "flash4/flash4.h"

namespace flash4::validation_test {
namespace {

// ---- the ABI's small functions --------------------------------------------------------------------------

TEST(CApi, VersionNumberMatchesVersionString) {
  const int version = flash4_version();
  const std::string text = std::to_string(version / 10000) + "." + std::to_string(version / 100 % 100) + "." +
                           std::to_string(version % 100);
  EXPECT_EQ(text, flash4_version_string());
}

// The library's version is generated from project(VERSION) in CMakeLists.txt, which tests/CMakeLists.txt
// passes to this test as FLASH4_PROJECT_VERSION.
TEST(CApi, VersionIsTheProjectVersion) {
  EXPECT_STREQ(flash4_version_string(), FLASH4_PROJECT_VERSION);
  int major = -1, minor = -1, patch = -1;
  ASSERT_EQ(std::sscanf(FLASH4_PROJECT_VERSION, "%d.%d.%d", &major, &minor, &patch), 3) << FLASH4_PROJECT_VERSION;
  EXPECT_EQ(flash4_version(), major * 10000 + minor * 100 + patch);
}

TEST(CApi, EveryStatusHasItsOwnName) {
  std::set<std::string> names;
  for (int s = FLASH4_SUCCESS; s <= FLASH4_ERROR_INTERNAL; ++s) {
    const std::string name = flash4_status_string(static_cast<flash4_status>(s));
    EXPECT_EQ(name.rfind("FLASH4_", 0), 0u) << "status " << s << " is named " << name;
    names.insert(name);
  }
  EXPECT_EQ(names.size(), static_cast<std::size_t>(FLASH4_ERROR_INTERNAL + 1));
  EXPECT_STREQ(flash4_status_string(static_cast<flash4_status>(999)), "unknown flash4_status");
}

TEST(CApi, LastErrorClearsOnSuccess) {
  flash4_fwd_params bad = valid_fwd();
  bad.head_dim = 84;
  ASSERT_NE(flash4_fwd_check(&bad), FLASH4_SUCCESS);
  ASSERT_NE(last_error(), "");
  const flash4_fwd_params good = valid_fwd();
  EXPECT_EQ(flash4_fwd_check(&good), FLASH4_SUCCESS);
  EXPECT_EQ(last_error(), "");
}

TEST(CApi, LastErrorIsPerThread) {
  flash4_fwd_params bad = valid_fwd();
  bad.head_dim = 84;
  ASSERT_NE(flash4_fwd_check(&bad), FLASH4_SUCCESS);
  std::string other_thread = "unset";
  std::thread([&] { other_thread = last_error(); }).join();
  EXPECT_EQ(other_thread, "");
  EXPECT_NE(last_error(), "");
}

// ---- forward: valid input ------------------------------------------------------------------------------

TEST(FwdValidation, ValidParamsPass) { expect_fwd_valid(valid_fwd()); }

TEST(FwdValidation, LseIsOptional) {
  flash4_fwd_params p = valid_fwd();
  p.lse = nullptr;
  expect_fwd_valid(p);
}

TEST(FwdValidation, EveryHeadDimAndDtypePasses) {
  for (flash4_dtype dtype : {FLASH4_DTYPE_BF16, FLASH4_DTYPE_FP16}) {
    for (int head_dim = 8; head_dim <= 256; head_dim += 8) {
      flash4_fwd_params p = valid_fwd();
      p.dtype = dtype;
      p.head_dim = head_dim;
      p.q_strides = p.o_strides = contiguous(kSeqlenQ, kHeadsQ, head_dim);
      p.k_strides = p.v_strides = contiguous(kSeqlenK, kHeadsKv, head_dim);
      SCOPED_TRACE("head_dim " + std::to_string(head_dim));
      expect_fwd_valid(p);
    }
  }
}

// causal = 1 is FlashAttention's "right window 0": any window_right >= -1 goes with it (and is ignored).
TEST(FwdValidation, CausalAcceptsAnyWindowRight) {
  for (int window_right : {-1, 0, 1, 16, std::numeric_limits<int32_t>::max()}) {
    flash4_fwd_params p = valid_fwd();
    p.causal = 1;
    p.window_right = window_right;
    p.window_left = 64;
    expect_fwd_valid(p);
  }
}

TEST(FwdValidation, MultiQueryAttentionPasses) {
  flash4_fwd_params p = valid_fwd();
  p.heads_kv = 1;
  p.k_strides = p.v_strides = contiguous(kSeqlenK, 1);
  expect_fwd_valid(p);
}

TEST(FwdValidation, VarlenPassesAndIgnoresBatchStrides) {
  flash4_fwd_params p = valid_fwd();
  make_varlen(p);
  p.q_strides.batch = p.k_strides.batch = p.v_strides.batch = p.o_strides.batch = 0;
  p.seqlen_q = p.seqlen_k = -5;  // ignored in varlen mode
  expect_fwd_valid(p);
}

TEST(FwdValidation, NoQueryRowsSucceedsAndLaunchesNothing) {
  // Without query rows there is nothing to write: flash4_fwd returns success without a CUDA call (on a machine
  // without a GPU any launch would answer FLASH4_ERROR_NO_DEVICE).
  for (auto empty : {+[](flash4_fwd_params& p) { p.seqlen_q = 0; },
                     +[](flash4_fwd_params& p) { p.seqlen_q = 0, p.seqlen_k = 0; },
                     +[](flash4_fwd_params& p) { make_varlen(p), p.total_q = 0; },
                     +[](flash4_fwd_params& p) { make_varlen(p), p.total_q = 0, p.total_k = 0; }}) {
    flash4_fwd_params p = valid_fwd();
    empty(p);
    std::size_t bytes = 1;
    EXPECT_EQ(flash4_fwd_workspace_size(&p, &bytes), FLASH4_SUCCESS) << last_error();
    EXPECT_EQ(bytes, 0u);
    EXPECT_EQ(flash4_fwd(&p, nullptr), FLASH4_SUCCESS) << last_error();
    EXPECT_EQ(last_error(), "");
  }
}

TEST(FwdValidation, NoKeyRowsIsValidAndNeedsNoWorkspace) {
  // Without key rows flash4_fwd writes o = 0 and lse = -inf (a launch: tests/gpu/test_empty_problem.cpp).
  for (auto empty : {+[](flash4_fwd_params& p) { p.seqlen_k = 0; },
                     +[](flash4_fwd_params& p) { make_varlen(p), p.total_k = 0; }}) {
    flash4_fwd_params p = valid_fwd();
    empty(p);
    p.k = p.v = nullptr;  // tensors without rows may be NULL
    expect_fwd_valid(p);
    std::size_t bytes = 1;
    EXPECT_EQ(flash4_fwd_workspace_size(&p, &bytes), FLASH4_SUCCESS) << last_error();
    EXPECT_EQ(bytes, 0u);
  }
}

TEST(FwdValidation, EmptyProblemsAreValidatedFirst) {
  // An empty problem still has every other argument checked before anything is written.
  flash4_fwd_params p = valid_fwd();
  p.seqlen_k = 0;
  p.softmax_scale = -1.0f;
  expect_fwd_rejected(p, FLASH4_ERROR_INVALID_ARGUMENT, "softmax_scale");
  p = valid_fwd();
  p.seqlen_k = 0;
  p.o = offset_bytes(p.o, 2);
  expect_fwd_rejected(p, FLASH4_ERROR_MISALIGNED, "o is not");
  p = valid_fwd();
  p.seqlen_k = 0;
  p.lse = offset_bytes(p.lse, 2);
  expect_fwd_rejected(p, FLASH4_ERROR_MISALIGNED, "lse");
  p = valid_fwd();
  p.seqlen_q = 0;
  p.head_dim = 84;
  expect_fwd_rejected(p, FLASH4_ERROR_UNSUPPORTED_HEAD_DIM, "head_dim");
}

TEST(FwdValidation, NoKeyRowsWithoutADeviceReportsNoDevice) {
  // The fill is a launch, so without a GPU the call says so (with one, these fake pointers must not be written).
  if (cuda_device_present()) GTEST_SKIP() << "a CUDA device is present: the fill would write the fake pointers";
  flash4_fwd_params p = valid_fwd();
  p.seqlen_k = 0;
  EXPECT_EQ(flash4_fwd(&p, nullptr), FLASH4_ERROR_NO_DEVICE) << last_error();
  EXPECT_NE(last_error(), "");
}

TEST(FwdValidation, EmptyTensorsMayBeNull) {
  // PyTorch gives empty tensors a NULL data pointer; tensors without rows are never accessed.
  flash4_fwd_params p = valid_fwd();
  p.seqlen_q = 0;
  p.q = p.o = nullptr;
  p.q_strides.batch = p.o_strides.batch = 0;
  EXPECT_EQ(flash4_fwd(&p, nullptr), FLASH4_SUCCESS) << last_error();
}

// ---- forward: each bad input ---------------------------------------------------------------------------

TEST(FwdValidation, NullParams) {
  expect_status(flash4_fwd_check(nullptr), FLASH4_ERROR_NULL_POINTER, "params", "flash4_fwd_check");
  expect_status(flash4_fwd(nullptr, nullptr), FLASH4_ERROR_NULL_POINTER, "params", "flash4_fwd");
  std::size_t bytes = 0;
  expect_status(flash4_fwd_workspace_size(nullptr, &bytes), FLASH4_ERROR_NULL_POINTER, "params",
                "flash4_fwd_workspace_size");
}

TEST(FwdValidation, NullWorkspaceSizeOutput) {
  const flash4_fwd_params p = valid_fwd();
  expect_status(flash4_fwd_workspace_size(&p, nullptr), FLASH4_ERROR_NULL_POINTER, "bytes",
                "flash4_fwd_workspace_size");
}

TEST(FwdValidation, UnknownStructSize) {
  // Not a released layout: neither the first (which ends where head_dim_v begins) nor the current one.
  for (std::size_t size : {std::size_t{0}, offsetof(flash4_fwd_params, head_dim_v) - 8, sizeof(flash4_fwd_params) - 4,
                           sizeof(flash4_fwd_params) + 8}) {
    flash4_fwd_params p = valid_fwd();
    p.struct_size = size;
    SCOPED_TRACE("struct_size " + std::to_string(size));
    expect_fwd_rejected(p, FLASH4_ERROR_INVALID_STRUCT_SIZE, "struct_size");
  }
}

TEST(FwdValidation, UnsupportedDtype) {
  flash4_fwd_params p = valid_fwd();
  p.dtype = static_cast<flash4_dtype>(7);
  expect_fwd_rejected(p, FLASH4_ERROR_UNSUPPORTED_DTYPE, "dtype");
  expect_fwd_rejected(p, FLASH4_ERROR_UNSUPPORTED_DTYPE, "FLASH4_DTYPE_BF16");
}

TEST(FwdValidation, UnsupportedHeadDim) {
  for (int head_dim : {-64, -8, 0, 4, 12, 84, 129, 264, 512}) {
    flash4_fwd_params p = valid_fwd();
    p.head_dim = head_dim;
    SCOPED_TRACE("head_dim " + std::to_string(head_dim));
    expect_fwd_rejected(p, FLASH4_ERROR_UNSUPPORTED_HEAD_DIM, "head_dim");
    expect_fwd_rejected(p, FLASH4_ERROR_UNSUPPORTED_HEAD_DIM, "a multiple of 8 in [8, 256]");
  }
}

TEST(FwdValidation, BatchBelowOne) {
  for (int batch : {0, -1}) {
    flash4_fwd_params p = valid_fwd();
    p.batch = batch;
    expect_fwd_rejected(p, FLASH4_ERROR_INVALID_SIZE, "batch");
  }
}

TEST(FwdValidation, HeadsBelowOne) {
  flash4_fwd_params p = valid_fwd();
  p.heads_q = 0;
  expect_fwd_rejected(p, FLASH4_ERROR_INVALID_SIZE, "heads_q");
  p = valid_fwd();
  p.heads_kv = -2;
  expect_fwd_rejected(p, FLASH4_ERROR_INVALID_SIZE, "heads_kv");
}

TEST(FwdValidation, NegativeSeqlen) {
  flash4_fwd_params p = valid_fwd();
  p.seqlen_q = -1;
  expect_fwd_rejected(p, FLASH4_ERROR_INVALID_SIZE, "seqlen_q");
  p = valid_fwd();
  p.seqlen_k = -1;
  expect_fwd_rejected(p, FLASH4_ERROR_INVALID_SIZE, "seqlen_k");
}

TEST(FwdValidation, HeadsQNotAMultipleOfHeadsKv) {
  flash4_fwd_params p = valid_fwd();
  p.heads_kv = 3;
  p.k_strides = p.v_strides = contiguous(kSeqlenK, 3);
  expect_fwd_rejected(p, FLASH4_ERROR_HEAD_RATIO, "heads_kv");
}

TEST(FwdValidation, NullTensor) {
  for (const char* name : {"q", "k", "v", "o"}) {
    flash4_fwd_params p = valid_fwd();
    const std::string n = name;
    if (n == "q") p.q = nullptr;
    if (n == "k") p.k = nullptr;
    if (n == "v") p.v = nullptr;
    if (n == "o") p.o = nullptr;
    SCOPED_TRACE(n);
    expect_fwd_rejected(p, FLASH4_ERROR_NULL_POINTER, n + " is NULL");
  }
}

TEST(FwdValidation, MisalignedTensorPointer) {
  flash4_fwd_params p = valid_fwd();
  p.q = offset_bytes(p.q, 8);
  expect_fwd_rejected(p, FLASH4_ERROR_MISALIGNED, "q is not 16-byte aligned");
  p = valid_fwd();
  p.o = offset_bytes(p.o, 2);
  expect_fwd_rejected(p, FLASH4_ERROR_MISALIGNED, "o is not 16-byte aligned");
}

TEST(FwdValidation, MisalignedLse) {
  flash4_fwd_params p = valid_fwd();
  p.lse = offset_bytes(p.lse, 2);
  expect_fwd_rejected(p, FLASH4_ERROR_MISALIGNED, "lse");
}

TEST(FwdValidation, StrideNotAMultipleOf16Bytes) {
  flash4_fwd_params p = valid_fwd();
  p.q_strides.seq += 4;  // 8 bytes off
  expect_fwd_rejected(p, FLASH4_ERROR_MISALIGNED, "q_strides.seq");
  p = valid_fwd();
  p.k_strides.head = kHeadDim + 1;
  expect_fwd_rejected(p, FLASH4_ERROR_MISALIGNED, "k_strides.head");
  p = valid_fwd();
  p.v_strides.batch -= 2;
  expect_fwd_rejected(p, FLASH4_ERROR_MISALIGNED, "v_strides.batch");
  p = valid_fwd();
  p.o_strides.seq -= 1;
  expect_fwd_rejected(p, FLASH4_ERROR_MISALIGNED, "o_strides.seq");
}

TEST(FwdValidation, NonPositiveStride) {
  flash4_fwd_params p = valid_fwd();
  p.q_strides.head = 0;
  expect_fwd_rejected(p, FLASH4_ERROR_INVALID_ARGUMENT, "q_strides.head");
  p = valid_fwd();
  p.k_strides.seq = -kHeadsKv * kHeadDim;
  expect_fwd_rejected(p, FLASH4_ERROR_INVALID_ARGUMENT, "k_strides.seq");
}

TEST(FwdValidation, StrideBeyondTmaLimit) {
  flash4_fwd_params p = valid_fwd();
  p.q_strides.batch = int64_t{1} << 40;  // elements: 2^41 bytes
  expect_fwd_rejected(p, FLASH4_ERROR_SIZE_OVERFLOW, "q_strides.batch");
}

TEST(FwdValidation, SoftmaxScaleNotFiniteOrNotPositive) {
  for (float scale : {kNaN, kInf, 0.0f, -0.125f}) {
    flash4_fwd_params p = valid_fwd();
    p.softmax_scale = scale;
    SCOPED_TRACE("softmax_scale " + std::to_string(scale));
    expect_fwd_rejected(p, FLASH4_ERROR_INVALID_ARGUMENT, "softmax_scale");
  }
}

TEST(FwdValidation, SoftcapNegativeOrNotFinite) {
  for (float softcap : {-1.0f, kNaN, kInf}) {
    flash4_fwd_params p = valid_fwd();
    p.softcap = softcap;
    SCOPED_TRACE("softcap " + std::to_string(softcap));
    expect_fwd_rejected(p, FLASH4_ERROR_INVALID_ARGUMENT, "softcap");
  }
}

TEST(FwdValidation, CausalNotZeroOrOne) {
  for (int causal : {-1, 2}) {
    flash4_fwd_params p = valid_fwd();
    p.causal = causal;
    expect_fwd_rejected(p, FLASH4_ERROR_INVALID_MASK, "causal");
  }
}

TEST(FwdValidation, WindowBelowMinusOne) {
  flash4_fwd_params p = valid_fwd();
  p.window_left = -2;
  expect_fwd_rejected(p, FLASH4_ERROR_INVALID_MASK, "window_left");
  p = valid_fwd();
  p.window_right = -3;
  expect_fwd_rejected(p, FLASH4_ERROR_INVALID_MASK, "window_right");
}

TEST(FwdValidation, VarlenWithOnlyOneCuSeqlens) {
  flash4_fwd_params p = valid_fwd();
  make_varlen(p);
  p.cu_seqlens_k = nullptr;
  expect_fwd_rejected(p, FLASH4_ERROR_INVALID_VARLEN, "cu_seqlens_k");
  p = valid_fwd();
  make_varlen(p);
  p.cu_seqlens_q = nullptr;
  expect_fwd_rejected(p, FLASH4_ERROR_INVALID_VARLEN, "cu_seqlens_q");
}

TEST(FwdValidation, VarlenMaxSeqlenBelowOne) {
  flash4_fwd_params p = valid_fwd();
  make_varlen(p);
  p.max_seqlen_q = 0;
  expect_fwd_rejected(p, FLASH4_ERROR_INVALID_VARLEN, "max_seqlen_q");
  p = valid_fwd();
  make_varlen(p);
  p.max_seqlen_k = -1;
  expect_fwd_rejected(p, FLASH4_ERROR_INVALID_VARLEN, "max_seqlen_k");
}

TEST(FwdValidation, VarlenNegativeTotal) {
  flash4_fwd_params p = valid_fwd();
  make_varlen(p);
  p.total_q = -1;
  expect_fwd_rejected(p, FLASH4_ERROR_INVALID_VARLEN, "total_q");
  p = valid_fwd();
  make_varlen(p);
  p.total_k = -1;
  expect_fwd_rejected(p, FLASH4_ERROR_INVALID_VARLEN, "total_k");
}

TEST(FwdValidation, VarlenMisalignedCuSeqlens) {
  flash4_fwd_params p = valid_fwd();
  make_varlen(p);
  p.cu_seqlens_q = offset_bytes(p.cu_seqlens_q, 2);
  expect_fwd_rejected(p, FLASH4_ERROR_MISALIGNED, "cu_seqlens_q");
}

TEST(FwdValidation, RowsTimesHeadsOverflowInt32) {
  // 2 * 2^27 rows * 8 heads = 2^31 (row, head) pairs: one more than int32 indexes (also the LSE entries).
  flash4_fwd_params p = valid_fwd();
  p.seqlen_q = 1 << 27;
  p.q_strides = p.o_strides = contiguous(p.seqlen_q, kHeadsQ);
  expect_fwd_rejected(p, FLASH4_ERROR_SIZE_OVERFLOW, "q: 268435456 rows x 8 heads");
  // The same count in varlen mode, from total_k.
  p = valid_fwd();
  make_varlen(p);
  p.heads_kv = kHeadsQ;
  p.total_k = 1 << 28;
  p.max_seqlen_k = 1 << 27;
  expect_fwd_rejected(p, FLASH4_ERROR_SIZE_OVERFLOW, "k: 268435456 rows x 8 heads");
}

TEST(FwdValidation, LargestOffsetOverflowsInt64) {
  // 2^25 batches of one row, 2^38 elements (2^39 bytes, within TMA's limit) apart: the last byte lies past 2^63.
  flash4_fwd_params p = valid_fwd();
  p.batch = 1 << 25;
  p.seqlen_q = 1;
  p.heads_q = p.heads_kv = 1;
  p.q_strides.batch = int64_t{1} << 38;
  expect_fwd_rejected(p, FLASH4_ERROR_SIZE_OVERFLOW, "q: the largest byte offset");
}

// ---- backward ------------------------------------------------------------------------------------------

TEST(BwdValidation, ValidParamsPass) {
  const flash4_bwd_params p = valid_bwd();
  EXPECT_EQ(flash4_bwd_check(&p), FLASH4_SUCCESS) << last_error();
  EXPECT_EQ(last_error(), "");
}

// The workspace is checked before anything touches the device, so these run without a GPU: too small
// is INVALID_ARGUMENT, an address off cudaMalloc's 256-byte alignment MISALIGNED, both naming it.
TEST(BwdValidation, WorkspaceTooSmallOrMisalignedIsRefusedBeforeAnyLaunch) {
  flash4_bwd_params p = valid_bwd();
  bool found = false;
#define FLASH4_PICK_BWD(dtype_name, hd)                                                             \
  if (!found && hd == kHeadDim) {                                                                  \
    p.dtype = std::string(#dtype_name) == "bf16" ? FLASH4_DTYPE_BF16 : FLASH4_DTYPE_FP16;           \
    found = true;                                                                                  \
  }
  FLASH4_FOR_EACH_BUILT_BWD_KERNEL(FLASH4_PICK_BWD)
#undef FLASH4_PICK_BWD
  if (!found) GTEST_SKIP() << "this build has no backward kernel at head_dim " << kHeadDim;
  std::size_t needed = 0;
  ASSERT_EQ(flash4_bwd_workspace_size(&p, &needed), FLASH4_SUCCESS) << last_error();
  ASSERT_GT(needed, 0u);
  p.workspace = fake_device_pointer(20);
  p.workspace_bytes = needed - 1;
  expect_status(flash4_bwd(&p, nullptr), FLASH4_ERROR_INVALID_ARGUMENT, "workspace", "flash4_bwd");
  p.workspace_bytes = needed;
  p.workspace = static_cast<char*>(fake_device_pointer(20)) + 16;
  expect_status(flash4_bwd(&p, nullptr), FLASH4_ERROR_MISALIGNED, "256-byte aligned", "flash4_bwd");
}

TEST(BwdValidation, NullParams) {
  expect_status(flash4_bwd_check(nullptr), FLASH4_ERROR_NULL_POINTER, "params", "flash4_bwd_check");
  expect_status(flash4_bwd(nullptr, nullptr), FLASH4_ERROR_NULL_POINTER, "params", "flash4_bwd");
}

TEST(BwdValidation, UnknownStructSize) {
  flash4_bwd_params p = valid_bwd();
  p.struct_size = sizeof(flash4_fwd_params);
  expect_bwd_rejected(p, FLASH4_ERROR_INVALID_STRUCT_SIZE, "flash4_bwd_params");
}

TEST(BwdValidation, DeterministicNotZeroOrOne) {
  flash4_bwd_params p = valid_bwd();
  p.deterministic = 2;
  expect_bwd_rejected(p, FLASH4_ERROR_INVALID_ARGUMENT, "deterministic");
}

TEST(BwdValidation, NullGradientTensor) {
  for (const char* name : {"dout", "dq", "dk", "dv"}) {
    flash4_bwd_params p = valid_bwd();
    const std::string n = name;
    if (n == "dout") p.dout = nullptr;
    if (n == "dq") p.dq = nullptr;
    if (n == "dk") p.dk = nullptr;
    if (n == "dv") p.dv = nullptr;
    SCOPED_TRACE(n);
    expect_bwd_rejected(p, FLASH4_ERROR_NULL_POINTER, n + " is NULL");
  }
}

TEST(BwdValidation, NullLse) {
  flash4_bwd_params p = valid_bwd();
  p.lse = nullptr;
  expect_bwd_rejected(p, FLASH4_ERROR_NULL_POINTER, "lse");
}

TEST(BwdValidation, MisalignedGradientStride) {
  flash4_bwd_params p = valid_bwd();
  p.dq_strides.seq += 2;
  expect_bwd_rejected(p, FLASH4_ERROR_MISALIGNED, "dq_strides.seq");
  p = valid_bwd();
  p.dk_strides.head += 4;
  expect_bwd_rejected(p, FLASH4_ERROR_MISALIGNED, "dk_strides.head");
}

TEST(BwdValidation, SharesTheForwardRules) {
  flash4_bwd_params p = valid_bwd();
  p.head_dim = 84;
  expect_bwd_rejected(p, FLASH4_ERROR_UNSUPPORTED_HEAD_DIM, "head_dim");
  p = valid_bwd();
  p.causal = 1;
  p.window_left = -2;
  expect_bwd_rejected(p, FLASH4_ERROR_INVALID_MASK, "window_left");
  p = valid_bwd();
  p.dv = offset_bytes(p.dv, 4);
  expect_bwd_rejected(p, FLASH4_ERROR_MISALIGNED, "dv");
}

TEST(BwdValidation, EmptyProblemWithNothingToWriteSucceedsAndLaunchesNothing) {
  flash4_bwd_params p = valid_bwd();
  p.seqlen_q = 0;
  p.seqlen_k = 0;
  p.lse = nullptr;
  p.q = p.o = p.dout = p.k = p.v = nullptr;
  p.dq = p.dk = p.dv = nullptr;
  std::size_t bytes = 1;
  EXPECT_EQ(flash4_bwd_workspace_size(&p, &bytes), FLASH4_SUCCESS) << last_error();
  EXPECT_EQ(bytes, 0u);
  EXPECT_EQ(flash4_bwd(&p, nullptr), FLASH4_SUCCESS) << last_error();
}

TEST(BwdValidation, EmptyProblemWithGradientsToZeroIsValidAndNeedsNoWorkspace) {
  // No queries: dk = dv = 0. No keys: dq = 0. Both are launches (tests/gpu/test_empty_problem.cpp).
  for (bool no_queries : {true, false}) {
    flash4_bwd_params p = valid_bwd();
    if (no_queries) {
      p.seqlen_q = 0;
      p.lse = nullptr;
      p.q = p.o = p.dout = p.dq = nullptr;
    } else {
      p.seqlen_k = 0;
      p.k = p.v = p.dk = p.dv = nullptr;
    }
    EXPECT_EQ(flash4_bwd_check(&p), FLASH4_SUCCESS) << last_error();
    std::size_t bytes = 1;
    EXPECT_EQ(flash4_bwd_workspace_size(&p, &bytes), FLASH4_SUCCESS) << last_error();
    EXPECT_EQ(bytes, 0u);
    if (!cuda_device_present()) {
      EXPECT_EQ(flash4_bwd(&p, nullptr), FLASH4_ERROR_NO_DEVICE) << last_error();
    }
  }
}

TEST(BwdValidation, EmptyProblemsAreValidatedFirst) {
  flash4_bwd_params p = valid_bwd();
  p.seqlen_q = 0;
  p.dk_strides.seq += 2;
  expect_bwd_rejected(p, FLASH4_ERROR_MISALIGNED, "dk_strides.seq");
  p = valid_bwd();
  p.seqlen_k = 0;
  p.dq = nullptr;
  expect_bwd_rejected(p, FLASH4_ERROR_NULL_POINTER, "dq");
  p = valid_bwd();
  p.seqlen_k = 0;
  p.lse = nullptr;
  expect_bwd_rejected(p, FLASH4_ERROR_NULL_POINTER, "lse");
}

}  // namespace
}  // namespace flash4::validation_test
