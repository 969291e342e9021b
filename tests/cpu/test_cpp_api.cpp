// The C++ API (include/flash4/flash4.hpp): TensorViews -> params, the view consistency errors (each names the
// tensor), Result / Status, and Workspace over a host-memory test allocator. No GPU: nothing here launches.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>
#include <variant>
#include <vector>

#include "flash4/flash4.hpp"

namespace {

using flash4::DType;
using flash4::TensorView;

constexpr std::int64_t kBatch = 2;
constexpr std::int64_t kSeqlenQ = 96;
constexpr std::int64_t kSeqlenK = 160;
constexpr std::int64_t kHeadsQ = 4;
constexpr std::int64_t kHeadsKv = 2;
constexpr std::int64_t kHeadDim = 64;

// Views never dereference their pointers here, so distinct 16-byte aligned addresses stand in for device memory.
void* fake_device_pointer(int index) { return reinterpret_cast<void*>(std::uintptr_t{0x1000000} * (index + 1)); }

struct Views {
  TensorView q =
      TensorView::contiguous(fake_device_pointer(0), DType::bf16, {kBatch, kSeqlenQ, kHeadsQ, kHeadDim});
  TensorView k =
      TensorView::contiguous(fake_device_pointer(1), DType::bf16, {kBatch, kSeqlenK, kHeadsKv, kHeadDim});
  TensorView v =
      TensorView::contiguous(fake_device_pointer(2), DType::bf16, {kBatch, kSeqlenK, kHeadsKv, kHeadDim});
  TensorView o =
      TensorView::contiguous(fake_device_pointer(3), DType::bf16, {kBatch, kSeqlenQ, kHeadsQ, kHeadDim});
  float* lse = static_cast<float*>(fake_device_pointer(4));

  flash4::Result<flash4_fwd_params> params(const flash4::AttnOptions& options = {},
                                           const flash4::VarlenArgs* varlen = nullptr) const {
    return flash4::make_fwd_params(q, k, v, o, lse, options, varlen);
  }
};

flash4::BackwardTensors backward_tensors() {
  const Views f;
  flash4::BackwardTensors t{f.q, f.k, f.v, f.o, f.q, f.lse, f.q, f.k, f.k};
  t.dout.data = fake_device_pointer(5);
  t.dq.data = fake_device_pointer(6);
  t.dk.data = fake_device_pointer(7);
  t.dv.data = fake_device_pointer(8);
  return t;
}

// The Result failed with `code` and a message naming `argument`.
template <class T>
void expect_error(const flash4::Result<T>& result, flash4_status code, const std::string& argument) {
  ASSERT_FALSE(result.ok());
  const flash4::Status status = result.status();
  EXPECT_EQ(status.code(), code) << status.to_string();
  EXPECT_NE(status.message().find(argument), std::string::npos)
      << status.message() << " does not name " << argument;
}

// ---- views and params ----------------------------------------------------------------------------------

TEST(CppApi, ContiguousViewHasRowMajorStrides) {
  const TensorView v = TensorView::contiguous(nullptr, DType::fp16, {2, 3, 4, 64});
  EXPECT_EQ(v.stride, (std::array<std::int64_t, 4>{3 * 4 * 64, 4 * 64, 64, 1}));
  const TensorView packed = TensorView::packed(nullptr, DType::bf16, 300, 8, 128);
  EXPECT_EQ(packed.shape, (std::array<std::int64_t, 4>{1, 300, 8, 128}));
  EXPECT_EQ(packed.stride[1], 8 * 128);
}

TEST(CppApi, FwdParamsFromViews) {
  const Views f;
  const auto made = f.params();
  ASSERT_TRUE(made.ok()) << made.status().to_string();
  const flash4_fwd_params& p = made.value();
  EXPECT_EQ(p.struct_size, sizeof(flash4_fwd_params));
  EXPECT_EQ(p.dtype, FLASH4_DTYPE_BF16);
  EXPECT_EQ(p.q, f.q.data);
  EXPECT_EQ(p.k, f.k.data);
  EXPECT_EQ(p.v, f.v.data);
  EXPECT_EQ(p.o, f.o.data);
  EXPECT_EQ(p.lse, f.lse);
  EXPECT_EQ(p.q_strides.batch, kSeqlenQ * kHeadsQ * kHeadDim);
  EXPECT_EQ(p.k_strides.seq, kHeadsKv * kHeadDim);
  EXPECT_EQ(p.o_strides.head, kHeadDim);
  EXPECT_EQ(p.batch, kBatch);
  EXPECT_EQ(p.seqlen_q, kSeqlenQ);
  EXPECT_EQ(p.seqlen_k, kSeqlenK);
  EXPECT_EQ(p.heads_q, kHeadsQ);
  EXPECT_EQ(p.heads_kv, kHeadsKv);
  EXPECT_EQ(p.head_dim, kHeadDim);
  EXPECT_FLOAT_EQ(p.softmax_scale, 1.0f / std::sqrt(static_cast<float>(kHeadDim)));
  EXPECT_EQ(p.causal, 0);
  EXPECT_EQ(p.window_left, -1);
  EXPECT_EQ(p.window_right, -1);
  EXPECT_EQ(p.softcap, 0.0f);
  EXPECT_EQ(p.cu_seqlens_q, nullptr);
  EXPECT_EQ(p.workspace, nullptr);
  EXPECT_EQ(flash4_fwd_check(&p), FLASH4_SUCCESS) << flash4_last_error_message();
}

TEST(CppApi, OptionsReachTheParams) {
  const auto made = Views{}.params(
      {.softmax_scale = 0.5f, .causal = true, .window_left = 32, .window_right = 0, .softcap = 30.0f});
  ASSERT_TRUE(made.ok()) << made.status().to_string();
  const flash4_fwd_params& p = made.value();
  EXPECT_EQ(p.softmax_scale, 0.5f);
  EXPECT_EQ(p.causal, 1);
  EXPECT_EQ(p.window_left, 32);
  EXPECT_EQ(p.window_right, 0);
  EXPECT_EQ(p.softcap, 30.0f);
  EXPECT_EQ(flash4_fwd_check(&p), FLASH4_SUCCESS) << flash4_last_error_message();
}

TEST(CppApi, VarlenParamsFromPackedViews) {
  constexpr std::int64_t kTotalQ = 300;
  constexpr std::int64_t kTotalK = 500;
  Views f;
  f.q = f.o = TensorView::packed(fake_device_pointer(0), DType::fp16, kTotalQ, kHeadsQ, kHeadDim);
  f.o.data = fake_device_pointer(3);
  f.k = f.v = TensorView::packed(fake_device_pointer(1), DType::fp16, kTotalK, kHeadsKv, kHeadDim);
  f.v.data = fake_device_pointer(2);
  const flash4::VarlenArgs varlen{static_cast<const std::int32_t*>(fake_device_pointer(10)),
                                  static_cast<const std::int32_t*>(fake_device_pointer(11)), 3, 128, 256};
  const auto made = f.params({}, &varlen);
  ASSERT_TRUE(made.ok()) << made.status().to_string();
  const flash4_fwd_params& p = made.value();
  EXPECT_EQ(p.dtype, FLASH4_DTYPE_FP16);
  EXPECT_EQ(p.batch, 3);
  EXPECT_EQ(p.cu_seqlens_q, varlen.cu_seqlens_q);
  EXPECT_EQ(p.cu_seqlens_k, varlen.cu_seqlens_k);
  EXPECT_EQ(p.max_seqlen_q, 128);
  EXPECT_EQ(p.max_seqlen_k, 256);
  EXPECT_EQ(p.total_q, kTotalQ);
  EXPECT_EQ(p.total_k, kTotalK);
  EXPECT_EQ(p.seqlen_q, 0) << "ignored in varlen mode";
  EXPECT_EQ(flash4_fwd_check(&p), FLASH4_SUCCESS) << flash4_last_error_message();
}

TEST(CppApi, DtypeMismatchNamesTheTensor) {
  Views f;
  f.v.dtype = DType::fp16;
  expect_error(f.params(), FLASH4_ERROR_UNSUPPORTED_DTYPE, "v.dtype is fp16 but q.dtype is bf16");
}

TEST(CppApi, ShapeMismatchNamesTheTensorAndDimension) {
  Views f;
  f.o.shape[2] = kHeadsQ + 1;
  expect_error(f.params(), FLASH4_ERROR_INVALID_SIZE, "o.shape[2] (heads)");
  f = Views{};
  f.v.shape[1] = kSeqlenK - 1;
  expect_error(f.params(), FLASH4_ERROR_INVALID_SIZE, "v.shape[1] (seq)");
  f = Views{};
  f.k.shape[0] = kBatch + 1;
  expect_error(f.params(), FLASH4_ERROR_INVALID_SIZE, "k.shape[0] (batch)");
  f = Views{};
  f.k.shape[3] = 128;
  expect_error(f.params(), FLASH4_ERROR_INVALID_SIZE, "k.shape[3] (head_dim)");
}

// v may have a head dim of its own (head_dim_v); o, dout and dv have v's, dq and dk q's and k's. The default
// softmax scale stays 1/sqrt(q's head dim).
TEST(CppApi, ValueHeadDimOfItsOwn) {
  Views f;
  f.q = TensorView::contiguous(fake_device_pointer(0), DType::bf16, {kBatch, kSeqlenQ, kHeadsQ, 192});
  f.k = TensorView::contiguous(fake_device_pointer(1), DType::bf16, {kBatch, kSeqlenK, kHeadsKv, 192});
  f.v = TensorView::contiguous(fake_device_pointer(2), DType::bf16, {kBatch, kSeqlenK, kHeadsKv, 128});
  f.o = TensorView::contiguous(fake_device_pointer(3), DType::bf16, {kBatch, kSeqlenQ, kHeadsQ, 128});
  const auto made = f.params();
  ASSERT_TRUE(made.ok()) << made.status().to_string();
  EXPECT_EQ(made.value().head_dim, 192);
  EXPECT_EQ(made.value().head_dim_v, 128);
  EXPECT_FLOAT_EQ(made.value().softmax_scale, 1.0f / std::sqrt(192.0f));
  EXPECT_EQ(flash4_fwd_check(&made.value()), FLASH4_SUCCESS) << flash4_last_error_message();
  Views wrong_o = f;
  wrong_o.o.shape[3] = 192;
  expect_error(wrong_o.params(), FLASH4_ERROR_INVALID_SIZE, "o.shape[3] (head_dim) is 192 but v.shape[3] is 128");
  Views wrong_v = f;
  wrong_v.v.shape[1] = kSeqlenK + 1;
  expect_error(wrong_v.params(), FLASH4_ERROR_INVALID_SIZE, "v.shape[1] (seq)");

  flash4::BackwardTensors t{f.q, f.k, f.v, f.o, f.o, f.lse, f.q, f.k, f.v};
  t.dout.data = fake_device_pointer(5);
  t.dq.data = fake_device_pointer(6);
  t.dk.data = fake_device_pointer(7);
  t.dv.data = fake_device_pointer(8);
  const auto bwd = flash4::make_bwd_params(t, {});
  ASSERT_TRUE(bwd.ok()) << bwd.status().to_string();
  EXPECT_EQ(bwd.value().head_dim_v, 128);
  EXPECT_EQ(flash4_bwd_check(&bwd.value()), FLASH4_SUCCESS) << flash4_last_error_message();
  t.dv = f.k;
  t.dv.data = fake_device_pointer(8);
  expect_error(flash4::make_bwd_params(t, {}), FLASH4_ERROR_INVALID_SIZE, "dv.shape[3] (head_dim) is 192");
}

TEST(CppApi, NonContiguousHeadDim) {
  Views f;
  f.q.stride[3] = 2;
  expect_error(f.params(), FLASH4_ERROR_INVALID_ARGUMENT, "q.stride[3]");
}

TEST(CppApi, NegativeOrHugeSize) {
  Views f;
  f.q.shape[1] = -1;
  expect_error(f.params(), FLASH4_ERROR_INVALID_SIZE, "q.shape[1] (seq) is -1");
  f = Views{};
  f.k.shape[1] = f.v.shape[1] = std::int64_t{1} << 31;
  expect_error(f.params(), FLASH4_ERROR_SIZE_OVERFLOW, "k.shape[1]");
}

TEST(CppApi, VarlenViewsMustBePacked) {
  Views f;
  const flash4::VarlenArgs varlen{static_cast<const std::int32_t*>(fake_device_pointer(10)),
                                  static_cast<const std::int32_t*>(fake_device_pointer(11)), kBatch, 128, 256};
  expect_error(f.params({}, &varlen), FLASH4_ERROR_INVALID_VARLEN, "q.shape[0]");
}

TEST(CppApi, BwdParamsFromViews) {
  const flash4::BackwardTensors t = backward_tensors();
  const auto made = flash4::make_bwd_params(t, {.deterministic = true});
  ASSERT_TRUE(made.ok()) << made.status().to_string();
  const flash4_bwd_params& p = made.value();
  EXPECT_EQ(p.struct_size, sizeof(flash4_bwd_params));
  EXPECT_EQ(p.deterministic, 1);
  EXPECT_EQ(p.dout, t.dout.data);
  EXPECT_EQ(p.lse, t.lse);
  EXPECT_EQ(p.dq, t.dq.data);
  EXPECT_EQ(p.dk, t.dk.data);
  EXPECT_EQ(p.dv, t.dv.data);
  EXPECT_EQ(p.dk_strides.seq, kHeadsKv * kHeadDim);
  EXPECT_EQ(flash4_bwd_check(&p), FLASH4_SUCCESS) << flash4_last_error_message();
}

// Sinks and seqused reach both params structs from the options; dsink from the backward's tensors.
TEST(CppApi, SinksAndSequsedReachTheParams) {
  const auto* sink = static_cast<const float*>(fake_device_pointer(20));
  const auto* used_q = static_cast<const std::int32_t*>(fake_device_pointer(21));
  const auto* used_k = static_cast<const std::int32_t*>(fake_device_pointer(22));
  flash4::BackwardTensors t = backward_tensors();
  t.dsink = static_cast<float*>(fake_device_pointer(23));
  const flash4::AttnOptions options{.sink = sink, .seqused_q = used_q, .seqused_k = used_k};
  const auto made = flash4::make_bwd_params(t, options);
  ASSERT_TRUE(made.ok()) << made.status().to_string();
  EXPECT_EQ(made.value().sink, sink);
  EXPECT_EQ(made.value().dsink, t.dsink);
  EXPECT_EQ(made.value().seqused_q, used_q);
  EXPECT_EQ(made.value().seqused_k, used_k);
  EXPECT_EQ(flash4_bwd_check(&made.value()), FLASH4_SUCCESS) << flash4_last_error_message();
  Views f;
  const auto forward = f.params(options);
  ASSERT_TRUE(forward.ok()) << forward.status().to_string();
  EXPECT_EQ(forward.value().sink, sink);
  EXPECT_EQ(forward.value().seqused_k, used_k);
}

TEST(CppApi, BwdGradientShapeMismatchNamesTheTensor) {
  flash4::BackwardTensors t = backward_tensors();
  t.dk.shape[1] = kSeqlenQ;
  expect_error(flash4::make_bwd_params(t, {}), FLASH4_ERROR_INVALID_SIZE, "dk.shape[1]");
  t = backward_tensors();
  t.dout.dtype = DType::fp16;
  expect_error(flash4::make_bwd_params(t, {}), FLASH4_ERROR_UNSUPPORTED_DTYPE, "dout.dtype");
}

// ---- Status and Result ---------------------------------------------------------------------------------

TEST(CppApi, StatusFromTheCAbiCarriesTheLastErrorMessage) {
  flash4_fwd_params p = Views{}.params().value();
  p.head_dim = 84;
  const flash4::Status status = flash4::Status::from_c(flash4_fwd_check(&p));
  EXPECT_EQ(status.code(), FLASH4_ERROR_UNSUPPORTED_HEAD_DIM);
  EXPECT_NE(status.message().find("head_dim"), std::string::npos);
  EXPECT_EQ(status.to_string().rfind("FLASH4_ERROR_UNSUPPORTED_HEAD_DIM: ", 0), 0u);
  EXPECT_TRUE(flash4::Status::from_c(FLASH4_SUCCESS).ok());
}

TEST(CppApi, ResultHoldsAValueOrAnError) {
  const flash4::Result<int> value = 7;
  ASSERT_TRUE(value.ok());
  EXPECT_EQ(value.value(), 7);
  EXPECT_TRUE(value.status().ok());

  const flash4::Result<int> error = flash4::Status{FLASH4_ERROR_INVALID_SIZE, "batch is 0"};
  EXPECT_FALSE(error.ok());
  EXPECT_EQ(error.status().code(), FLASH4_ERROR_INVALID_SIZE);
  EXPECT_THROW((void)error.value(), std::bad_variant_access);

  const flash4::Result<int> misuse = flash4::Status{};
  EXPECT_FALSE(misuse.ok());
  EXPECT_EQ(misuse.status().code(), FLASH4_ERROR_INTERNAL);
}

// ---- Workspace -----------------------------------------------------------------------------------------

// Host memory standing in for device memory, with a log of what the Workspace asked for.
struct TestAllocator {
  struct Call {
    bool allocate;
    std::size_t bytes;
    flash4_stream_t stream;
  };
  std::vector<Call> calls;
  bool fail = false;

  flash4::Allocator allocator() {
    return {[](void* self, std::size_t bytes, flash4_stream_t stream) -> void* {
              auto& a = *static_cast<TestAllocator*>(self);
              a.calls.push_back({true, bytes, stream});
              return a.fail ? nullptr : std::malloc(bytes);
            },
            [](void* self, void* pointer, std::size_t bytes, flash4_stream_t stream) {
              static_cast<TestAllocator*>(self)->calls.push_back({false, bytes, stream});
              std::free(pointer);
            },
            this};
  }
  int live() const {
    int n = 0;
    for (const Call& c : calls) n += c.allocate ? 1 : -1;
    return n;
  }
};

flash4_stream_t fake_stream(int index) { return reinterpret_cast<flash4_stream_t>(std::uintptr_t{0x100} * index); }

TEST(CppApi, WorkspaceGrowsAndNeverShrinks) {
  TestAllocator test;
  {
    flash4::Workspace workspace(test.allocator());
    EXPECT_TRUE(workspace.reserve(0, fake_stream(1)).ok());
    EXPECT_TRUE(test.calls.empty()) << "0 bytes allocate nothing";
    EXPECT_TRUE(workspace.reserve(1000, fake_stream(1)).ok());
    EXPECT_TRUE(workspace.reserve(500, fake_stream(1)).ok());
    EXPECT_EQ(workspace.size(), 1000u);
    ASSERT_EQ(test.calls.size(), 1u);
    EXPECT_TRUE(workspace.reserve(2000, fake_stream(1)).ok());
    EXPECT_EQ(workspace.size(), 2000u);
    EXPECT_NE(workspace.data(), nullptr);
    EXPECT_EQ(test.live(), 1);
  }
  EXPECT_EQ(test.live(), 0) << "the destructor frees";
}

TEST(CppApi, WorkspaceMovesToANewStreamWithAFreshBuffer) {
  TestAllocator test;
  flash4::Workspace workspace(test.allocator());
  ASSERT_TRUE(workspace.reserve(1000, fake_stream(1)).ok());
  ASSERT_TRUE(workspace.reserve(100, fake_stream(2)).ok());
  ASSERT_EQ(test.calls.size(), 3u);
  EXPECT_FALSE(test.calls[1].allocate);
  EXPECT_EQ(test.calls[1].stream, fake_stream(1)) << "the old buffer is freed on the stream that used it";
  EXPECT_TRUE(test.calls[2].allocate);
  EXPECT_EQ(test.calls[2].stream, fake_stream(2));
  EXPECT_EQ(test.calls[2].bytes, 1000u);
}

TEST(CppApi, WorkspaceMoveTransfersOwnership) {
  TestAllocator test;
  flash4::Workspace a(test.allocator());
  ASSERT_TRUE(a.reserve(64, fake_stream(1)).ok());
  void* data = a.data();
  flash4::Workspace b = std::move(a);
  EXPECT_EQ(b.data(), data);
  EXPECT_EQ(b.size(), 64u);
  EXPECT_EQ(test.live(), 1);
}

TEST(CppApi, WorkspaceAllocationFailure) {
  TestAllocator test;
  test.fail = true;
  flash4::Workspace workspace(test.allocator());
  const flash4::Status status = workspace.reserve(4096, fake_stream(1));
  EXPECT_EQ(status.code(), FLASH4_ERROR_CUDA);
  EXPECT_NE(status.message().find("workspace"), std::string::npos) << status.message();
  EXPECT_EQ(workspace.size(), 0u);
}

TEST(CppApi, WorkspaceWithoutAllocatorFunctions) {
  flash4::Workspace workspace(flash4::Allocator{});
  EXPECT_EQ(workspace.reserve(16, fake_stream(1)).code(), FLASH4_ERROR_INVALID_ARGUMENT);
}

// ---- forward / backward up to the launch ---------------------------------------------------------------

TEST(CppApi, ForwardReportsViewErrorsBeforeAllocating) {
  TestAllocator test;
  flash4::Workspace workspace(test.allocator());
  Views f;
  f.o.shape[1] = 1;
  const flash4::Status status = flash4::forward(f.q, f.k, f.v, f.o, f.lse, {}, fake_stream(1), workspace);
  EXPECT_EQ(status.code(), FLASH4_ERROR_INVALID_SIZE);
  EXPECT_NE(status.message().find("o.shape[1]"), std::string::npos) << status.message();
  EXPECT_TRUE(test.calls.empty());
}

TEST(CppApi, ForwardReportsLibraryValidationErrors) {
  TestAllocator test;
  flash4::Workspace workspace(test.allocator());
  const Views f;
  const flash4::Status status =
      flash4::forward(f.q, f.k, f.v, f.o, f.lse, {.softmax_scale = -1.0f}, fake_stream(1), workspace);
  EXPECT_EQ(status.code(), FLASH4_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(status.message().find("softmax_scale"), std::string::npos) << status.message();
}

TEST(CppApi, EmptyForwardAndBackwardSucceedWithoutWorkspace) {
  // Problems with nothing to write (no query rows; for the backward no rows at all) launch nothing, so the fake
  // stream and pointers are never used. The fills of the others are checked in tests/gpu/test_empty_problem.cpp.
  TestAllocator test;
  flash4::Workspace workspace(test.allocator());
  Views f;
  f.q.shape[1] = f.o.shape[1] = 0;
  EXPECT_TRUE(flash4::forward(f.q, f.k, f.v, f.o, f.lse, {}, fake_stream(1), workspace).ok());
  flash4::BackwardTensors t = backward_tensors();
  t.q.shape[1] = t.o.shape[1] = t.dout.shape[1] = t.dq.shape[1] = 0;
  t.k.shape[1] = t.v.shape[1] = t.dk.shape[1] = t.dv.shape[1] = 0;
  EXPECT_TRUE(flash4::backward(t, {}, fake_stream(1), workspace).ok());
  EXPECT_TRUE(test.calls.empty());
}

}  // namespace
