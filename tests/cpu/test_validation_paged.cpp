// Validation of the forward's paged K/V fields (flash4.h: block_table, rule 6 and the paged forms of rules
// 10-12), the previous params layout (without them) and the C++ API's paged form. No GPU needed.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>

#include "flash4/flash4.hpp"
#include "kernels/common/paged_kv.hpp"
#include "launch/fwd_tile_config.hpp"
#include "validation_params.hpp"

namespace flash4::validation_test {
namespace {

constexpr int kPageSize = 64;
constexpr int kNumPages = 40;
constexpr int kPagesPerSequence = kSeqlenK / kPageSize;  // 4

// A valid varlen forward whose k / v are a paged cache of kNumPages pages.
flash4_fwd_params valid_paged() {
  flash4_fwd_params p = valid_fwd();
  make_varlen(p);
  p.k_strides = p.v_strides = contiguous(kPageSize, kHeadsKv);
  p.block_table = fake_device_pointer<const int32_t>(12);
  p.block_table_stride = kPagesPerSequence;
  p.page_size = kPageSize;
  p.num_pages = kNumPages;
  return p;
}

TEST(PagedValidation, ValidParamsPass) {
  expect_fwd_valid(valid_paged());
  flash4_fwd_params fixed = valid_paged();  // fixed length: every sequence has seqlen_k keys
  fixed.cu_seqlens_q = fixed.cu_seqlens_k = nullptr;
  expect_fwd_valid(fixed);
}

TEST(PagedValidation, TotalKMayBoundTheKeyLengths) {
  flash4_fwd_params p = valid_paged();
  p.total_k = kBatch * kSeqlenK;  // batch * max_seqlen_k: the most it may be (rule 6)
  expect_fwd_valid(p);
  p.total_k += 1;
  expect_fwd_rejected(p, FLASH4_ERROR_INVALID_VARLEN, "total_k");
}

TEST(PagedValidation, EveryPageSizeMultipleOf16Passes) {
  for (int page_size : {16, 32, 48, 80, 112, 128, 256}) {
    flash4_fwd_params p = valid_paged();
    p.page_size = page_size;
    p.k_strides = p.v_strides = contiguous(page_size, kHeadsKv);
    p.block_table_stride = (kSeqlenK + page_size - 1) / page_size;
    SCOPED_TRACE("page_size " + std::to_string(page_size));
    expect_fwd_valid(p);
  }
}

TEST(PagedValidation, PageSizeNotAPositiveMultipleOf16) {
  for (int page_size : {0, -16, 8, 1, 24, 65}) {
    flash4_fwd_params p = valid_paged();
    p.page_size = page_size;
    p.block_table_stride = 1 << 20;
    SCOPED_TRACE("page_size " + std::to_string(page_size));
    expect_fwd_rejected(p, FLASH4_ERROR_INVALID_SIZE, "page_size");
  }
}

TEST(PagedValidation, NumPagesBelowOne) {
  for (int num_pages : {0, -1}) {
    flash4_fwd_params p = valid_paged();
    p.num_pages = num_pages;
    expect_fwd_rejected(p, FLASH4_ERROR_INVALID_SIZE, "num_pages");
  }
}

TEST(PagedValidation, MisalignedBlockTable) {
  flash4_fwd_params p = valid_paged();
  p.block_table = offset_bytes(p.block_table, 2);
  expect_fwd_rejected(p, FLASH4_ERROR_MISALIGNED, "block_table");
}

TEST(PagedValidation, BlockTableRowsShorterThanTheLongestSequence) {
  flash4_fwd_params p = valid_paged();
  p.block_table_stride = kPagesPerSequence - 1;
  expect_fwd_rejected(p, FLASH4_ERROR_INVALID_ARGUMENT, "block_table_stride");
  // The longest sequence is min(max_seqlen_k, total_k): a smaller total needs fewer pages per row.
  p.total_k = kSeqlenK - kPageSize;
  expect_fwd_valid(p);
}

TEST(PagedValidation, CacheStridesAreCheckedWithThePageStride) {
  flash4_fwd_params p = valid_paged();
  p.k_strides.batch = 0;  // the page stride is used even in varlen mode
  expect_fwd_rejected(p, FLASH4_ERROR_INVALID_ARGUMENT, "k_strides.batch");
  p = valid_paged();
  p.v_strides.batch = 4;
  expect_fwd_rejected(p, FLASH4_ERROR_MISALIGNED, "v_strides.batch");
}

TEST(PagedValidation, CacheRowsAreNumPagesTimesPageSize) {
  // The cache spans num_pages * page_size rows: an output on its last bytes overlaps it, one just past it not.
  flash4_fwd_params p = valid_paged();
  const int64_t cache_bytes = int64_t{kNumPages} * kPageSize * kHeadsKv * kHeadDim * 2;
  p.o = offset_bytes(const_cast<void*>(p.k), static_cast<int>(cache_bytes - 16));  // o starts on the cache's last bytes
  expect_fwd_rejected(p, FLASH4_ERROR_INVALID_ARGUMENT, "o overlaps k");
  p.o = offset_bytes(const_cast<void*>(p.k), static_cast<int>(cache_bytes));  // just past the cache
  p.v = fake_device_pointer(20);
  expect_fwd_valid(p);
}

TEST(PagedValidation, OutputsMayNotOverlapTheBlockTable) {
  flash4_fwd_params p = valid_paged();
  // The table spans (batch - 1) * stride + pages entries.
  p.lse = reinterpret_cast<float*>(const_cast<int32_t*>(p.block_table) + (kBatch - 1) * kPagesPerSequence +
                                   kPagesPerSequence - 1);
  expect_fwd_rejected(p, FLASH4_ERROR_INVALID_ARGUMENT, "lse overlaps block_table");
  p.lse = reinterpret_cast<float*>(const_cast<int32_t*>(p.block_table) + kBatch * kPagesPerSequence);
  expect_fwd_valid(p);
}

TEST(PagedValidation, BlockTableSpanOverflowingInt64) {
  flash4_fwd_params p = valid_paged();
  p.block_table_stride = INT64_MAX / 2;
  expect_fwd_rejected(p, FLASH4_ERROR_SIZE_OVERFLOW, "block_table");
}

TEST(PagedValidation, PreviousLayoutReadsAsNotPaged) {
  // A caller of the layout without the paged fields: the bytes past its struct_size are never read.
  flash4_fwd_params p = valid_fwd();
  p.struct_size = offsetof(flash4_fwd_params, head_dim_v);
  p.block_table = fake_device_pointer<const int32_t>(12);
  p.page_size = 7;  // would be rejected if it were read
  expect_fwd_valid(p);
}

TEST(PagedValidation, BoxesTileEveryKeyBlockOnSwizzleAtoms) {
  for (int head_dim : {64, 96, 128, 192, 256}) {
    const int block_n = fwd_tile_config(head_dim).block_n;
    for (int page_size = 16; page_size <= 512; page_size += 16) {
      const int rows = page_box_rows(page_size, block_n);
      SCOPED_TRACE("head_dim " + std::to_string(head_dim) + ", page_size " + std::to_string(page_size));
      EXPECT_EQ(page_size % rows, 0);
      EXPECT_EQ(block_n % rows, 0);
      EXPECT_EQ(rows % 8, 0);  // whole swizzle atoms
      EXPECT_LE(rows, 256);    // a TMA box dimension
    }
  }
  EXPECT_EQ(page_box_rows(48, 128), 16);
  EXPECT_EQ(page_box_rows(256, 112), 16);
  EXPECT_EQ(page_box_rows(256, 128), 128);
  EXPECT_EQ(page_box_rows(160, 80), 80);
}

TEST(PagedCppApi, FillsThePagedFieldsFromTheCacheViews) {
  const auto dtype = DType::bf16;
  auto q = TensorView::packed(fake_device_pointer(0), dtype, kBatch * kSeqlenQ, kHeadsQ, kHeadDim);
  auto o = TensorView::packed(fake_device_pointer(3), dtype, kBatch * kSeqlenQ, kHeadsQ, kHeadDim);
  auto k = TensorView::contiguous(fake_device_pointer(1), dtype, {kNumPages, kPageSize, kHeadsKv, kHeadDim});
  auto v = TensorView::contiguous(fake_device_pointer(2), dtype, {kNumPages, kPageSize, kHeadsKv, kHeadDim});
  const VarlenArgs varlen{fake_device_pointer<const int32_t>(10), fake_device_pointer<const int32_t>(11), kBatch,
                          kSeqlenQ, kSeqlenK};
  const PagedKvArgs paged{fake_device_pointer<const int32_t>(12), kPagesPerSequence, 0, kBatch * kSeqlenK};
  Result<flash4_fwd_params> made = make_fwd_params(q, k, v, o, nullptr, {}, &varlen, &paged);
  ASSERT_TRUE(made.ok()) << made.status().to_string();
  const flash4_fwd_params& p = made.value();
  EXPECT_EQ(p.page_size, kPageSize);
  EXPECT_EQ(p.num_pages, kNumPages);
  EXPECT_EQ(p.total_k, kBatch * kSeqlenK);
  EXPECT_EQ(p.k_strides.batch, int64_t{kPageSize} * kHeadsKv * kHeadDim);
  EXPECT_EQ(flash4_fwd_check(&p), FLASH4_SUCCESS) << last_error();

  auto v_other = TensorView::contiguous(fake_device_pointer(2), dtype, {kNumPages, kPageSize + 16, kHeadsKv, kHeadDim});
  Result<flash4_fwd_params> mismatched = make_fwd_params(q, k, v_other, o, nullptr, {}, &varlen, &paged);
  ASSERT_FALSE(mismatched.ok());
  EXPECT_NE(mismatched.status().message().find("v.shape[1]"), std::string::npos) << mismatched.status().message();
}

}  // namespace
}  // namespace flash4::validation_test
