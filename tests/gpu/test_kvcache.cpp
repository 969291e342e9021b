// flash4_kvcache on the GPU against the fp64 reference (tests/gpu/kvcache_case.hpp): decoding and speculative
// decoding, contiguous and paged caches (page sizes 1..256, not only powers of two), appends that cross pages,
// ragged cache_seqlens including 0, GQA and MQA, causal, windows and softcap, split counts 1..64 and the
// heuristic, cache_batch_idx, bad device-side values (NaN rows, nothing written outside the cache), and head
// dims without a kernel of their own and v's head dim apart from q's, on rows padded with poison.
// Run them with --gtest_filter='*Kvcache*'. Kernels this build did not compile are skipped.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <string>
#include <utility>
#include <vector>

#include "built_decode_kernels.hpp"
#include "gpu/gpu_available.hpp"
#include "gpu/kvcache_case.hpp"
#include "host/kernel_choice.hpp"

namespace flash4::test {
namespace {

struct DecodeKernel {
  flash4_dtype dtype;
  int head_dim;
};

std::vector<DecodeKernel> built_decode_kernels() {
  std::vector<DecodeKernel> kernels;
#define FLASH4_TEST_ADD_DECODE(dtype_name, hd) \
  kernels.push_back({std::string(#dtype_name) == "bf16" ? FLASH4_DTYPE_BF16 : FLASH4_DTYPE_FP16, hd});
  FLASH4_FOR_EACH_BUILT_DECODE_KERNEL(FLASH4_TEST_ADD_DECODE)
#undef FLASH4_TEST_ADD_DECODE
  return kernels;
}

// A function that appends `base` changed by an edit to `cases`.
auto adder(std::vector<KvcacheCase>& cases, const KvcacheCase& base) {
  return [&cases, base](auto edit) {
    KvcacheCase c = base;
    edit(c);
    cases.push_back(c);
  };
}

// Cases every built (dtype, head dim) runs.
void add_kernel_cases(const DecodeKernel& kernel, std::vector<KvcacheCase>& cases) {
  KvcacheCase base;
  base.dtype = kernel.dtype;
  base.head_dim = kernel.head_dim;
  const auto add = adder(cases, base);
  // Decoding without appends: a full cache (cache_seqlens NULL), ragged lengths with an empty one, unsplit
  // and split.
  add([](KvcacheCase& c) { c.capacity = 300; });
  for (int splits : {0, 1, 3}) {
    add([&](KvcacheCase& c) {
      c.capacity = 300;
      c.cache_seqlens = {0, 1, 299};
      c.num_splits = splits;
    });
  }
  // One appended token per sequence (the usual decode step), contiguous and paged.
  for (int page : {0, 64}) {
    add([&](KvcacheCase& c) {
      c.seqlen_new = 1;
      c.capacity = 256;
      c.page_size = page;
      c.cache_seqlens = {0, 100, 255};
    });
  }
  // Speculative decoding: 4 query rows and 4 appended keys, causal, GQA 8:1 (32 packed rows: 2 row tiles).
  add([](KvcacheCase& c) {
    c.seqlen_q = c.seqlen_new = 4;
    c.heads_q = 16;
    c.heads_kv = 2;
    c.causal = true;
    c.capacity = 500;
    c.page_size = 16;
    c.cache_seqlens = {61, 0, 300};
  });
  // MQA, fp32 LSE not asked for.
  add([](KvcacheCase& c) {
    c.heads_q = 8;
    c.heads_kv = 1;
    c.seqlen_new = 2;
    c.cache_seqlens = {5, 130, 64};
    c.lse = false;
  });
}

std::vector<KvcacheCase> kvcache_grid() {
  std::vector<KvcacheCase> cases;
  const std::vector<DecodeKernel> kernels = built_decode_kernels();
  for (const DecodeKernel& kernel : kernels) add_kernel_cases(kernel, cases);
  // The wider grid on one kernel: bf16 at head dim 128 when built, else the first one built.
  if (kernels.empty()) return cases;
  KvcacheCase base;
  base.dtype = kernels.front().dtype;
  base.head_dim = kernels.front().head_dim;
  for (const DecodeKernel& kernel : kernels) {
    if (kernel.dtype == FLASH4_DTYPE_BF16 && kernel.head_dim == 128) base.head_dim = 128, base.dtype = kernel.dtype;
  }
  const auto add = adder(cases, base);
  // Page sizes 1..256, powers of two and not; appends of 5 rows cross page boundaries (keys 61..65 cross 64,
  // 30..34 cross 32 and 16 and 48-row pages).
  for (int page : {1, 16, 32, 48, 64, 100, 128, 256}) {
    add([&](KvcacheCase& c) {
      c.page_size = page;
      c.capacity = 700;
      c.seqlen_new = 5;
      c.cache_seqlens = {61, 30, 0, 690};
      c.batch = 4;
    });
  }
  // Split counts 1..64 over 4096 keys (64 blocks), with ragged lengths so that some splits are empty.
  for (int splits : {1, 2, 3, 7, 16, 31, 64}) {
    add([&](KvcacheCase& c) {
      c.batch = 2;
      c.capacity = 4096;
      c.seqlen_new = 1;
      c.cache_seqlens = {4095, 700};
      c.page_size = splits % 2 ? 64 : 0;
      c.num_splits = splits;
    });
  }
  // Long context, the heuristic's split count, MQA-like wide group: batch 1.
  add([](KvcacheCase& c) {
    c.batch = 1;
    c.heads_q = 32;
    c.heads_kv = 4;
    c.capacity = 16384;
    c.page_size = 64;
    c.seqlen_new = 1;
    c.cache_seqlens = {16000};
  });
  // Many packed rows: 16 query rows x 8 heads = 128 rows, two row blocks of 64; and 5 x 3 = 15 rows.
  add([](KvcacheCase& c) {
    c.seqlen_q = c.seqlen_new = 16;
    c.heads_q = 16;
    c.heads_kv = 2;
    c.causal = true;
    c.capacity = 400;
    c.cache_seqlens = {100, 3, 384};
    c.num_splits = 2;
  });
  add([](KvcacheCase& c) {
    c.seqlen_q = 5;
    c.seqlen_new = 5;
    c.heads_q = 6;
    c.heads_kv = 2;
    c.causal = true;
    c.capacity = 200;
    c.cache_seqlens = {0, 7, 150};
  });
  // Sq > keys with causal: the first query rows see nothing (O = 0, LSE = -inf).
  add([](KvcacheCase& c) {
    c.seqlen_q = 6;
    c.seqlen_new = 0;
    c.causal = true;
    c.capacity = 64;
    c.cache_seqlens = {2, 0, 64};
  });
  // Windows and softcap, speculative.
  add([](KvcacheCase& c) {
    c.seqlen_q = c.seqlen_new = 4;
    c.causal = true;
    c.window_left = 40;
    c.capacity = 1000;
    c.page_size = 32;
    c.cache_seqlens = {900, 10, 500};
    c.num_splits = 3;
  });
  add([](KvcacheCase& c) {
    c.seqlen_q = 3;
    c.window_left = 17;
    c.window_right = 5;
    c.capacity = 300;
    c.cache_seqlens = {250, 20, 1};
  });
  add([](KvcacheCase& c) {
    c.softcap = 30.0f;
    c.seqlen_new = 1;
    c.capacity = 1000;
    c.cache_seqlens = {999, 400, 0};
    c.num_splits = 4;
  });
  // cache_batch_idx: sequences read a permutation of a larger cache, and append into it; on a stream of its own.
  add([](KvcacheCase& c) {
    c.cache_batch_idx = true;
    c.own_stream = true;
    c.seqlen_new = 2;
    c.cache_seqlens = {10, 0, 200};
  });
  return cases;
}

// One bad device-side value in sequence 1 of 3, on every built kernel width (the load passes differ by
// width), and on the widest with a head dim below it (the zero-filled columns).
std::vector<KvcacheCase> bad_value_cases() {
  std::vector<KvcacheCase> cases;
  const std::vector<DecodeKernel> kernels = built_decode_kernels();
  if (kernels.empty()) return cases;
  std::vector<KvcacheCase> bases;
  for (const DecodeKernel& kernel : kernels) {
    if (kernel.dtype != kernels.front().dtype) continue;
    KvcacheCase base;
    base.dtype = kernel.dtype;
    base.head_dim = kernel.head_dim;
    bases.push_back(base);
  }
  KvcacheCase narrower = bases.back();
  narrower.head_dim -= 24;
  bases.push_back(narrower);
  for (KvcacheCase base : bases) {
    base.seqlen_new = 2;
    base.capacity = 512;
    base.cache_seqlens = {100, 200, 300};
    base.bad_sequence = 1;
    for (int splits : {1, 4}) {
      for (BadValue bad : {BadValue::seqlen_past_capacity, BadValue::negative_seqlen,
                           BadValue::batch_idx_out_of_range, BadValue::page_out_of_range}) {
        KvcacheCase c = base;
        c.bad = bad;
        c.num_splits = splits;
        c.cache_batch_idx = bad == BadValue::batch_idx_out_of_range;
        c.page_size = bad == BadValue::page_out_of_range || bad == BadValue::negative_seqlen ? 64 : 0;
        cases.push_back(c);
      }
    }
  }
  return cases;
}

std::string test_name(const ::testing::TestParamInfo<KvcacheCase>& info) {
  std::string name = info.param.name();
  for (char& ch : name) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return name + "_" + std::to_string(info.index);
}

class KvcacheGrid : public ::testing::TestWithParam<KvcacheCase> {};

TEST_P(KvcacheGrid, MatchesReference) {
  FLASH4_REQUIRE_GPU();
  const KvcacheOutcome outcome = run_kvcache_case(GetParam());
  EXPECT_TRUE(outcome.o);
  EXPECT_TRUE(outcome.lse);
  EXPECT_TRUE(outcome.cache);
  EXPECT_TRUE(outcome.guards);
}

INSTANTIATE_TEST_SUITE_P(Sm90, KvcacheGrid, ::testing::ValuesIn(kvcache_grid()), test_name);

class KvcacheBadValues : public ::testing::TestWithParam<KvcacheCase> {};

TEST_P(KvcacheBadValues, NaNRowsAndNothingWrittenOutsideTheCache) {
  FLASH4_REQUIRE_GPU();
  const KvcacheOutcome outcome = run_kvcache_case(GetParam());
  EXPECT_TRUE(outcome.bad_rows);
  EXPECT_TRUE(outcome.o);  // the other sequences
  EXPECT_TRUE(outcome.lse);
  EXPECT_TRUE(outcome.cache);
  EXPECT_TRUE(outcome.guards);
}

INSTANTIATE_TEST_SUITE_P(Sm90, KvcacheBadValues, ::testing::ValuesIn(bad_value_cases()), test_name);

// Head dims served by a wider decode kernel (40 and 56 by 64; 80, 96 and 120 by 128; 136 and 160 by 192; 200
// and 248 by 256) and v's head dim apart from q's (DeepSeek's 192 / 128, and v wider than q), full widths on
// padded rows (192, 256). Every case pads each row of every tensor with poison that must stay unread and
// unwritten, appends (the cache rows' columns past their head dim must stay as they were), and runs split
// (the partials and the combine at head_dim_v) and unsplit.
std::vector<KvcacheCase> head_dim_cases() {
  std::vector<KvcacheCase> cases;
  KvcacheCase base;
  base.seqlen_q = base.seqlen_new = 2;
  base.causal = true;
  base.capacity = 600;
  base.cache_seqlens = {0, 77, 590};
  const std::pair<int, int> dims[] = {{40, 0},  {56, 0},  {80, 0},   {96, 0},   {120, 0},   {136, 0},  {160, 0},
                                      {192, 0}, {200, 0}, {248, 0},  {256, 0},  {192, 128}, {128, 192}, {40, 256},
                                      {256, 64}};
  int variant = 0;
  for (auto [d, dv] : dims) {
    adder(cases, base)([&, d = d, dv = dv](KvcacheCase& c) {
      c.head_dim = d;
      c.head_dim_v = dv;
      c.pad = variant % 2 == 0 ? 8 : 24;
      c.page_size = variant % 3 == 0 ? 48 : 0;
      c.num_splits = variant % 2 == 0 ? 1 : 3;
    });
    ++variant;
  }
  // Decoding one token with the heuristic's splits, MQA, on a long paged cache: 136 and 192 / 128.
  for (auto [d, dv] : {std::pair{136, 0}, std::pair{192, 128}}) {
    adder(cases, KvcacheCase{})([d = d, dv = dv](KvcacheCase& c) {
      c.head_dim = d;
      c.head_dim_v = dv;
      c.pad = 8;
      c.batch = 1;
      c.heads_q = 16;
      c.heads_kv = 1;
      c.seqlen_new = 1;
      c.capacity = 8192;
      c.page_size = 64;
      c.cache_seqlens = {8000};
    });
  }
  // 64 packed rows (4 row tiles, every warp its own rows) with softcap at 192 / 128.
  adder(cases, base)([](KvcacheCase& c) {
    c.head_dim = 192;
    c.head_dim_v = 128;
    c.pad = 16;
    c.seqlen_q = c.seqlen_new = 8;
    c.heads_q = 16;
    c.softcap = 30.0f;
    c.capacity = 300;
    c.cache_seqlens = {10, 200, 0};
    c.num_splits = 2;
  });
  return cases;
}

class KvcacheHeadDims : public ::testing::TestWithParam<KvcacheCase> {};

TEST_P(KvcacheHeadDims, MatchesReferenceAndLeavesThePaddingAlone) {
  FLASH4_REQUIRE_GPU();
  const KvcacheCase& c = GetParam();
  const int needed = std::max(c.head_dim, c.head_dim_v);
  const int width = host::serving_head_dim(host::built_decode_kernels(), c.dtype, needed);
  if (width == 0) GTEST_SKIP() << "this build has no decode kernel of width >= " << needed;
  SCOPED_TRACE("served by the decode kernel of width " + std::to_string(width));
  const KvcacheOutcome outcome = run_kvcache_case(c);
  EXPECT_TRUE(outcome.o);
  EXPECT_TRUE(outcome.lse);
  EXPECT_TRUE(outcome.cache);
  EXPECT_TRUE(outcome.guards);
}

INSTANTIATE_TEST_SUITE_P(Sm90, KvcacheHeadDims, ::testing::ValuesIn(head_dim_cases()), test_name);

}  // namespace
}  // namespace flash4::test
