// Validation of flash4_kvcache_params through the C ABI: every bad input gets its own status and a message
// naming the argument, from flash4_kvcache_check, flash4_kvcache_workspace_size and flash4_kvcache alike,
// before any CUDA call (so no GPU is needed). Valid launches are the GPU tests' (tests/gpu/test_kvcache.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>

#include <cuda_runtime_api.h>

#include "flash4/flash4.h"
#include "flash4/flash4.hpp"
#include "host/kernel_choice.hpp"
#include "launch/decode_config.hpp"

namespace {

constexpr int kBatch = 3;
constexpr int kHeadsQ = 32;
constexpr int kHeadsKv = 8;
constexpr int kHeadDim = 128;
constexpr int kCapacity = 4096;
constexpr int kPageSize = 64;

template <class T = void>
T* fake_device_pointer(int index) {
  return reinterpret_cast<T*>(std::uintptr_t{0x1000000} * (index + 1));
}

flash4_strides contiguous(int64_t seqlen, int64_t heads, int64_t head_dim = kHeadDim) {
  return {seqlen * heads * head_dim, heads * head_dim, head_dim};
}

// Decoding one token per sequence with an append, not paged; num_splits = 1 so that sizing the workspace needs
// no device (the heuristic reads the SM count).
flash4_kvcache_params valid_call() {
  flash4_kvcache_params p{};
  p.struct_size = sizeof(p);
  p.dtype = FLASH4_DTYPE_BF16;
  p.q = fake_device_pointer(0);
  p.k_cache = fake_device_pointer(1);
  p.v_cache = fake_device_pointer(2);
  p.k_new = fake_device_pointer(3);
  p.v_new = fake_device_pointer(4);
  p.o = fake_device_pointer(5);
  p.lse = fake_device_pointer<float>(6);
  p.q_strides = p.o_strides = contiguous(1, kHeadsQ);
  p.k_cache_strides = p.v_cache_strides = contiguous(kCapacity, kHeadsKv);
  p.k_new_strides = p.v_new_strides = contiguous(1, kHeadsKv);
  p.batch = kBatch;
  p.seqlen_q = 1;
  p.seqlen_new = 1;
  p.heads_q = kHeadsQ;
  p.heads_kv = kHeadsKv;
  p.head_dim = kHeadDim;
  p.cache_batch = kBatch;
  p.cache_seqlen = kCapacity;
  p.cache_seqlens = fake_device_pointer<const int32_t>(7);
  p.softmax_scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));
  p.window_left = p.window_right = -1;
  p.num_splits = 1;
  return p;
}

void make_paged(flash4_kvcache_params& p) {
  p.block_table = fake_device_pointer<const int32_t>(8);
  p.max_pages_per_seq = kCapacity / kPageSize;
  p.block_table_stride = p.max_pages_per_seq;
  p.num_pages = 1000;
  p.page_size = kPageSize;
  p.k_cache_strides = p.v_cache_strides = contiguous(kPageSize, kHeadsKv);
  p.cache_batch = p.cache_seqlen = 0;  // ignored when paged
}

std::string last_error() { return flash4_last_error_message(); }

void expect_status(flash4_status got, flash4_status status, const std::string& argument, const char* call) {
  const std::string message = last_error();
  EXPECT_EQ(got, status) << call << " returned " << flash4_status_string(got) << " (" << message << "), expected "
                         << flash4_status_string(status);
  EXPECT_NE(message.find(argument), std::string::npos)
      << call << ": the message \"" << message << "\" does not name " << argument;
}

void expect_rejected(const flash4_kvcache_params& p, flash4_status status, const std::string& argument) {
  expect_status(flash4_kvcache_check(&p), status, argument, "flash4_kvcache_check");
  std::size_t bytes = 1;
  expect_status(flash4_kvcache_workspace_size(&p, &bytes), status, argument, "flash4_kvcache_workspace_size");
  EXPECT_EQ(bytes, 0u) << "a rejected call reports 0 workspace bytes";
  expect_status(flash4_kvcache(&p, nullptr), status, argument, "flash4_kvcache");
}

void expect_valid(const flash4_kvcache_params& p) {
  EXPECT_EQ(flash4_kvcache_check(&p), FLASH4_SUCCESS) << last_error();
  EXPECT_EQ(last_error(), "");
}

TEST(KvcacheValidation, ValidCallsPass) {
  expect_valid(valid_call());
  flash4_kvcache_params paged = valid_call();
  make_paged(paged);
  expect_valid(paged);
  flash4_kvcache_params no_append = valid_call();
  no_append.seqlen_new = 0;
  no_append.k_new = no_append.v_new = nullptr;
  no_append.cache_seqlens = nullptr;  // every sequence fills the cache
  no_append.lse = nullptr;
  expect_valid(no_append);
  flash4_kvcache_params speculative = valid_call();
  speculative.seqlen_q = speculative.seqlen_new = 4;
  speculative.q_strides = speculative.o_strides = contiguous(4, kHeadsQ);
  speculative.k_new_strides = speculative.v_new_strides = contiguous(4, kHeadsKv);
  speculative.causal = 1;
  speculative.window_right = 0;
  speculative.window_left = 100;
  speculative.softcap = 30;
  expect_valid(speculative);
  flash4_kvcache_params indexed = valid_call();
  indexed.cache_batch = 10;
  indexed.cache_batch_idx = fake_device_pointer<const int32_t>(9);
  expect_valid(indexed);
}

// Whether this build has a bf16 decode kernel for head dims up to `needed` (sizing a workspace needs one).
bool decode_kernel_serves(int needed) {
  return flash4::host::serving_head_dim(flash4::host::built_decode_kernels(), FLASH4_DTYPE_BF16, needed) != 0;
}

TEST(KvcacheValidation, UnsplitCallsNeedNoWorkspaceAndAskedSplitsDo) {
  if (!decode_kernel_serves(kHeadDim)) GTEST_SKIP() << "no decode kernel of width >= " << kHeadDim << " built";
  flash4_kvcache_params p = valid_call();
  std::size_t bytes = 1;
  ASSERT_EQ(flash4_kvcache_workspace_size(&p, &bytes), FLASH4_SUCCESS) << last_error();
  EXPECT_EQ(bytes, 0u);
  p.num_splits = 4;
  ASSERT_EQ(flash4_kvcache_workspace_size(&p, &bytes), FLASH4_SUCCESS) << last_error();
  EXPECT_GE(bytes, 4u * kBatch * kHeadsQ * kHeadDim * sizeof(float));
}

TEST(KvcacheValidation, StridesOfAxesOfExtentOneAreNotUsed) {
  flash4_kvcache_params p = valid_call();
  p.q_strides.seq = 3;  // seqlen_q = 1: never multiplied by anything but 0
  p.k_new_strides.seq = 0;
  expect_valid(p);
}

TEST(KvcacheValidation, NullParamsAndBytes) {
  expect_status(flash4_kvcache_check(nullptr), FLASH4_ERROR_NULL_POINTER, "params", "check");
  const flash4_kvcache_params p = valid_call();
  expect_status(flash4_kvcache_workspace_size(&p, nullptr), FLASH4_ERROR_NULL_POINTER, "bytes", "workspace_size");
}

TEST(KvcacheValidation, UnknownStructSize) {
  flash4_kvcache_params p = valid_call();
  p.struct_size = sizeof(flash4_fwd_params);
  expect_rejected(p, FLASH4_ERROR_INVALID_STRUCT_SIZE, "struct_size");
}

// valid_call() with head dims d (q, k_cache, k_new) and dv (v_cache, v_new, o; 0: d) and contiguous strides.
flash4_kvcache_params with_head_dims(int d, int dv) {
  flash4_kvcache_params p = valid_call();
  const int value_dim = dv != 0 ? dv : d;
  p.head_dim = d;
  p.head_dim_v = dv;
  p.q_strides = contiguous(1, kHeadsQ, d);
  p.o_strides = contiguous(1, kHeadsQ, value_dim);
  p.k_cache_strides = contiguous(kCapacity, kHeadsKv, d);
  p.v_cache_strides = contiguous(kCapacity, kHeadsKv, value_dim);
  p.k_new_strides = contiguous(1, kHeadsKv, d);
  p.v_new_strides = contiguous(1, kHeadsKv, value_dim);
  return p;
}

TEST(KvcacheValidation, DtypeAndHeadDim) {
  flash4_kvcache_params p = valid_call();
  p.dtype = static_cast<flash4_dtype>(7);
  expect_rejected(p, FLASH4_ERROR_UNSUPPORTED_DTYPE, "dtype");
  for (int head_dim : {-8, 0, 4, 12, 100, 260, 264, 512}) {
    p = valid_call();
    p.head_dim = head_dim;
    expect_rejected(p, FLASH4_ERROR_UNSUPPORTED_HEAD_DIM, "head_dim is");
  }
  for (int head_dim_v : {-8, 4, 12, 100, 264}) {
    p = valid_call();
    p.head_dim_v = head_dim_v;
    expect_rejected(p, FLASH4_ERROR_UNSUPPORTED_HEAD_DIM, "head_dim_v is");
  }
}

// Every multiple of 8 up to 256 (served by the next wider decode kernel), and v's head dim apart from q's.
TEST(KvcacheValidation, EveryMultipleOfEightUpTo256AndAValueHeadDimOfItsOwn) {
  for (int d = 8; d <= 256; d += 8) expect_valid(with_head_dims(d, 0));
  for (auto [d, dv] : {std::pair{192, 128}, std::pair{128, 192}, std::pair{40, 256}, std::pair{256, 8}}) {
    SCOPED_TRACE(std::to_string(d) + " / " + std::to_string(dv));
    flash4_kvcache_params p = with_head_dims(d, dv);
    expect_valid(p);
    make_paged(p);
    p.k_cache_strides = contiguous(kPageSize, kHeadsKv, d);
    p.v_cache_strides = contiguous(kPageSize, kHeadsKv, dv);
    expect_valid(p);
  }
}

// The split partials hold head_dim_v columns per row.
TEST(KvcacheValidation, SplitWorkspaceFollowsTheValueHeadDim) {
  if (!decode_kernel_serves(192)) GTEST_SKIP() << "no decode kernel of width >= 192 built";
  std::size_t narrow = 0, wide = 0;
  flash4_kvcache_params p = with_head_dims(192, 64);
  p.num_splits = 4;
  ASSERT_EQ(flash4_kvcache_workspace_size(&p, &narrow), FLASH4_SUCCESS) << last_error();
  p = with_head_dims(64, 192);
  p.num_splits = 4;
  ASSERT_EQ(flash4_kvcache_workspace_size(&p, &wide), FLASH4_SUCCESS) << last_error();
  EXPECT_GE(narrow, 4u * kBatch * kHeadsQ * 64 * sizeof(float));
  EXPECT_GE(wide, 4u * kBatch * kHeadsQ * 192 * sizeof(float));
  EXPECT_LT(narrow, 4u * kBatch * kHeadsQ * 192 * sizeof(float));
}

// The decode kernels this build has are kernel widths among its forward head dims. A valid head dim wider than
// all of them is NO_KERNEL naming the dims, found before the workspace or the device is looked at.
TEST(KvcacheValidation, NoBuiltDecodeKernelWideEnoughIsNoKernel) {
  int widest = 0;
  for (const flash4::host::BuiltKernel& k : flash4::host::built_decode_kernels()) {
    EXPECT_TRUE(flash4::decode::is_kernel_width(k.head_dim)) << k.head_dim;
    EXPECT_EQ(flash4::host::serving_head_dim(flash4::host::built_forward_kernels(), k.dtype, k.head_dim), k.head_dim)
        << k.head_dim;
    if (k.dtype == FLASH4_DTYPE_BF16) widest = std::max(widest, k.head_dim);
  }
  if (widest == flash4::decode::kMaxWidth) GTEST_SKIP() << "a bf16 decode kernel serves every valid head dim";
  const int dv = widest + 8;
  const flash4_kvcache_params p = with_head_dims(8, dv);
  EXPECT_EQ(flash4_kvcache_check(&p), FLASH4_SUCCESS) << last_error();
  std::size_t bytes = 1;
  const std::string names = "head_dim_v " + std::to_string(dv);
  expect_status(flash4_kvcache_workspace_size(&p, &bytes), FLASH4_ERROR_NO_KERNEL, names, "workspace_size");
  EXPECT_EQ(bytes, 0u);
  expect_status(flash4_kvcache(&p, nullptr), FLASH4_ERROR_NO_KERNEL, names, "flash4_kvcache");
}

// A caller of the first layout (which ends before head_dim_v) has v's head dim equal to q's: whatever lies
// past its struct is not read.
TEST(KvcacheValidation, TheFirstLayoutEndsBeforeHeadDimV) {
  flash4_kvcache_params p = valid_call();
  p.struct_size = offsetof(flash4_kvcache_params, head_dim_v);
  p.head_dim_v = 12;  // not a head dim, and not part of that layout
  expect_valid(p);
  p.struct_size = sizeof(p);
  expect_rejected(p, FLASH4_ERROR_UNSUPPORTED_HEAD_DIM, "head_dim_v");
}

TEST(KvcacheValidation, Sizes) {
  for (auto [field, set] : {std::pair{"batch", +[](flash4_kvcache_params& p) { p.batch = 0; }},
                            std::pair{"seqlen_q", +[](flash4_kvcache_params& p) { p.seqlen_q = 0; }},
                            std::pair{"heads_q", +[](flash4_kvcache_params& p) { p.heads_q = -1; }},
                            std::pair{"heads_kv", +[](flash4_kvcache_params& p) { p.heads_kv = 0; }},
                            std::pair{"seqlen_new", +[](flash4_kvcache_params& p) { p.seqlen_new = -1; }}}) {
    flash4_kvcache_params p = valid_call();
    set(p);
    SCOPED_TRACE(field);
    expect_rejected(p, FLASH4_ERROR_INVALID_SIZE, field);
  }
  flash4_kvcache_params p = valid_call();
  p.heads_q = 12;
  expect_rejected(p, FLASH4_ERROR_HEAD_RATIO, "heads_kv");
}

TEST(KvcacheValidation, UnpagedCacheShape) {
  flash4_kvcache_params p = valid_call();
  p.cache_seqlen = 0;
  expect_rejected(p, FLASH4_ERROR_INVALID_SIZE, "cache_seqlen");
  p = valid_call();
  p.cache_batch = kBatch - 1;  // sequence b uses cache row b without cache_batch_idx
  expect_rejected(p, FLASH4_ERROR_INVALID_SIZE, "cache_batch");
}

TEST(KvcacheValidation, PagedCacheShape) {
  for (auto [field, set] : {std::pair{"page_size", +[](flash4_kvcache_params& p) { p.page_size = 0; }},
                            std::pair{"num_pages", +[](flash4_kvcache_params& p) { p.num_pages = 0; }},
                            std::pair{"max_pages_per_seq", +[](flash4_kvcache_params& p) { p.max_pages_per_seq = 0; }}}) {
    flash4_kvcache_params p = valid_call();
    make_paged(p);
    set(p);
    SCOPED_TRACE(field);
    expect_rejected(p, FLASH4_ERROR_INVALID_SIZE, field);
  }
  flash4_kvcache_params p = valid_call();
  make_paged(p);
  p.block_table_stride = p.max_pages_per_seq - 1;
  expect_rejected(p, FLASH4_ERROR_INVALID_ARGUMENT, "block_table_stride");
  p = valid_call();
  make_paged(p);
  p.cache_batch_idx = fake_device_pointer<const int32_t>(9);
  expect_rejected(p, FLASH4_ERROR_INVALID_ARGUMENT, "cache_batch_idx");
  p = valid_call();
  make_paged(p);
  p.max_pages_per_seq = p.block_table_stride = 1 << 20;
  p.page_size = 4096;  // 2^32 keys per sequence
  expect_rejected(p, FLASH4_ERROR_SIZE_OVERFLOW, "max_pages_per_seq * page_size");
}

TEST(KvcacheValidation, AppendsNeedNewRowsAndCacheSeqlensAndRoom) {
  flash4_kvcache_params p = valid_call();
  p.k_new = nullptr;
  expect_rejected(p, FLASH4_ERROR_NULL_POINTER, "k_new");
  p = valid_call();
  p.v_new = nullptr;
  expect_rejected(p, FLASH4_ERROR_NULL_POINTER, "v_new");
  p = valid_call();
  p.cache_seqlens = nullptr;
  expect_rejected(p, FLASH4_ERROR_INVALID_ARGUMENT, "cache_seqlens");
  p = valid_call();
  p.seqlen_new = kCapacity + 1;
  p.k_new_strides = p.v_new_strides = contiguous(kCapacity + 1, kHeadsKv);
  expect_rejected(p, FLASH4_ERROR_INVALID_SIZE, "seqlen_new");
}

TEST(KvcacheValidation, ScoresMaskAndSplits) {
  flash4_kvcache_params p = valid_call();
  p.softmax_scale = std::numeric_limits<float>::quiet_NaN();
  expect_rejected(p, FLASH4_ERROR_INVALID_ARGUMENT, "softmax_scale");
  p = valid_call();
  p.softcap = -1;
  expect_rejected(p, FLASH4_ERROR_INVALID_ARGUMENT, "softcap");
  p = valid_call();
  p.causal = 2;
  expect_rejected(p, FLASH4_ERROR_INVALID_MASK, "causal");
  p = valid_call();
  p.window_left = -2;
  expect_rejected(p, FLASH4_ERROR_INVALID_MASK, "window_left");
  p = valid_call();
  p.causal = 1;
  p.window_right = 3;
  expect_rejected(p, FLASH4_ERROR_INVALID_MASK, "window_right");
  for (int splits : {-1, 129}) {
    p = valid_call();
    p.num_splits = splits;
    expect_rejected(p, FLASH4_ERROR_INVALID_ARGUMENT, "num_splits");
  }
}

// `base` moved by `bytes`.
template <class T>
T* shifted(T* base, int bytes) {
  return reinterpret_cast<T*>(reinterpret_cast<std::uintptr_t>(base) + bytes);
}

// Sets the named tensor pointer of p.
void set_tensor(flash4_kvcache_params& p, const std::string& name, void* value) {
  if (name == "q") p.q = value;
  if (name == "o") p.o = value;
  if (name == "k_cache") p.k_cache = value;
  if (name == "v_cache") p.v_cache = value;
  if (name == "k_new") p.k_new = value;
  if (name == "v_new") p.v_new = value;
}

TEST(KvcacheValidation, TensorPointersAndStrides) {
  for (const char* name : {"q", "o", "k_cache", "v_cache", "k_new", "v_new"}) {
    SCOPED_TRACE(name);
    flash4_kvcache_params p = valid_call();
    set_tensor(p, name, nullptr);
    expect_rejected(p, FLASH4_ERROR_NULL_POINTER, name);
    p = valid_call();
    set_tensor(p, name, shifted(fake_device_pointer(0), 8));
    expect_rejected(p, FLASH4_ERROR_MISALIGNED, name);
  }
  flash4_kvcache_params p = valid_call();
  p.k_cache_strides.seq = kHeadsKv * kHeadDim + 4;  // 8 bytes past a 16-byte multiple
  expect_rejected(p, FLASH4_ERROR_MISALIGNED, "k_cache_strides.seq");
  p = valid_call();
  p.v_cache_strides.head = 0;
  expect_rejected(p, FLASH4_ERROR_INVALID_ARGUMENT, "v_cache_strides.head");
  p = valid_call();
  p.o_strides.batch = -kHeadDim;
  expect_rejected(p, FLASH4_ERROR_INVALID_ARGUMENT, "o_strides.batch");
  p = valid_call();
  p.k_cache_strides.batch = std::numeric_limits<int64_t>::max() / 2 / 8 * 8;  // aligned, but (3 - 1) x it overflows
  expect_rejected(p, FLASH4_ERROR_SIZE_OVERFLOW, "k_cache");
}

TEST(KvcacheValidation, SmallArraysMustBeAligned) {
  flash4_kvcache_params p = valid_call();
  p.lse = shifted(p.lse, 2);
  expect_rejected(p, FLASH4_ERROR_MISALIGNED, "lse");
  p = valid_call();
  p.cache_seqlens = shifted(p.cache_seqlens, 1);
  expect_rejected(p, FLASH4_ERROR_MISALIGNED, "cache_seqlens");
  p = valid_call();
  p.cache_batch_idx = shifted(fake_device_pointer<const int32_t>(9), 2);
  expect_rejected(p, FLASH4_ERROR_MISALIGNED, "cache_batch_idx");
  p = valid_call();
  make_paged(p);
  p.block_table = shifted(p.block_table, 2);
  expect_rejected(p, FLASH4_ERROR_MISALIGNED, "block_table");
}

TEST(KvcacheValidation, CountsOverflowingInt32) {
  flash4_kvcache_params p = valid_call();
  p.batch = 1 << 20;
  p.seqlen_q = 1 << 12;  // 2^32 x 32 output rows
  p.cache_batch = p.batch;
  expect_rejected(p, FLASH4_ERROR_SIZE_OVERFLOW, "seqlen_q");
}

TEST(KvcacheValidation, ValidLaunchWithoutAGpuSaysNoDevice) {
  int count = 0;
  const bool device = cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
  cudaGetLastError();
  if (device) GTEST_SKIP() << "a CUDA device is present: valid launches are the GPU tests'";
  const flash4_kvcache_params p = valid_call();
  const flash4_status status = flash4_kvcache(&p, nullptr);
  // NO_KERNEL when this build lacks bf16/d128, otherwise the launch needs the device it does not find.
  EXPECT_TRUE(status == FLASH4_ERROR_NO_DEVICE || status == FLASH4_ERROR_NO_KERNEL) << flash4_status_string(status);
  std::size_t bytes = 0;
  flash4_kvcache_params heuristic = p;
  heuristic.num_splits = 0;  // the heuristic reads the SM count
  EXPECT_EQ(flash4_kvcache_workspace_size(&heuristic, &bytes),
            decode_kernel_serves(kHeadDim) ? FLASH4_ERROR_NO_DEVICE : FLASH4_ERROR_NO_KERNEL)
      << last_error();
}

// The C++ API checks the views against each other before filling the C params.
TEST(KvcacheCppApi, ViewsMustAgree) {
  flash4::KvcacheTensors t;
  t.q = flash4::TensorView::contiguous(fake_device_pointer(0), flash4::DType::bf16, {kBatch, 1, kHeadsQ, kHeadDim});
  t.o = flash4::TensorView::contiguous(fake_device_pointer(1), flash4::DType::bf16, {kBatch, 1, kHeadsQ, kHeadDim});
  t.k_cache = flash4::TensorView::contiguous(fake_device_pointer(2), flash4::DType::bf16, {5, kCapacity, kHeadsKv, kHeadDim});
  t.v_cache = flash4::TensorView::contiguous(fake_device_pointer(3), flash4::DType::bf16, {5, kCapacity, kHeadsKv, kHeadDim});
  auto made = flash4::make_kvcache_params(t, {.causal = true});
  ASSERT_TRUE(made.ok()) << made.status().to_string();
  EXPECT_EQ(made.value().cache_batch, 5);
  EXPECT_EQ(made.value().cache_seqlen, kCapacity);
  EXPECT_EQ(made.value().heads_kv, kHeadsKv);
  EXPECT_EQ(flash4_kvcache_check(&made.value()), FLASH4_SUCCESS) << last_error();

  flash4::KvcacheTensors paged = t;
  int32_t* table = fake_device_pointer<int32_t>(4);
  paged.block_table = {table, 64, 0};
  paged.k_cache.shape = paged.v_cache.shape = {300, 64, kHeadsKv, kHeadDim};
  made = flash4::make_kvcache_params(paged, {});
  ASSERT_TRUE(made.ok());
  EXPECT_EQ(made.value().num_pages, 300);
  EXPECT_EQ(made.value().page_size, 64);
  EXPECT_EQ(made.value().block_table_stride, 64);

  flash4::KvcacheTensors bad = t;
  bad.v_cache.shape[2] = kHeadsKv / 2;
  EXPECT_NE(flash4::make_kvcache_params(bad, {}).status().message().find("v_cache"), std::string::npos);
  bad = t;
  bad.k_new = flash4::TensorView::contiguous(fake_device_pointer(5), flash4::DType::bf16, {kBatch, 1, kHeadsKv, kHeadDim});
  EXPECT_NE(flash4::make_kvcache_params(bad, {}).status().message().find("v_new"), std::string::npos);
  bad.v_new = flash4::TensorView::contiguous(fake_device_pointer(6), flash4::DType::fp16, {kBatch, 1, kHeadsKv, kHeadDim});
  EXPECT_EQ(flash4::make_kvcache_params(bad, {}).status().code(), FLASH4_ERROR_UNSUPPORTED_DTYPE);

  // v's head dim of its own: o and v_new follow v_cache's.
  flash4::KvcacheTensors mla = t;
  mla.q = flash4::TensorView::contiguous(fake_device_pointer(0), flash4::DType::bf16, {kBatch, 1, kHeadsQ, 192});
  mla.k_cache = flash4::TensorView::contiguous(fake_device_pointer(2), flash4::DType::bf16, {5, kCapacity, kHeadsKv, 192});
  made = flash4::make_kvcache_params(mla, {});
  ASSERT_TRUE(made.ok()) << made.status().to_string();
  EXPECT_EQ(made.value().head_dim, 192);
  EXPECT_EQ(made.value().head_dim_v, kHeadDim);
  EXPECT_EQ(flash4_kvcache_check(&made.value()), FLASH4_SUCCESS) << last_error();
  bad = mla;
  bad.o.shape[3] = 192;
  EXPECT_NE(flash4::make_kvcache_params(bad, {}).status().message().find("o.shape[3]"), std::string::npos);
  bad = mla;
  bad.k_new = flash4::TensorView::contiguous(fake_device_pointer(5), flash4::DType::bf16, {kBatch, 1, kHeadsKv, 192});
  bad.v_new = flash4::TensorView::contiguous(fake_device_pointer(6), flash4::DType::bf16, {kBatch, 1, kHeadsKv, 192});
  EXPECT_NE(flash4::make_kvcache_params(bad, {}).status().message().find("v_new.shape[3]"), std::string::npos);
  bad.v_new = flash4::TensorView::contiguous(fake_device_pointer(6), flash4::DType::bf16, {kBatch, 1, kHeadsKv, kHeadDim});
  EXPECT_TRUE(flash4::make_kvcache_params(bad, {}).ok());
}

}  // namespace
