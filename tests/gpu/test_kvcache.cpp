// flash4_kvcache on the GPU against the fp64 reference (tests/gpu/kvcache_case.hpp): decoding and speculative
// decoding, contiguous and paged caches (page sizes 1..256, not only powers of two), appends that cross pages,
// ragged cache_seqlens including 0, GQA and MQA, causal, windows and softcap, split counts 1..64 and the
// heuristic, cache_batch_idx, and bad device-side values (NaN rows, nothing written outside the cache).
// Run them with --gtest_filter='Kvcache*'. Kernels this build did not compile are skipped.
#include <gtest/gtest.h>

#include <cctype>
#include <string>
#include <vector>

#include "built_decode_kernels.hpp"
#include "gpu/gpu_available.hpp"
#include "gpu/kvcache_case.hpp"

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

// One bad device-side value in sequence 1 of 3.
std::vector<KvcacheCase> bad_value_cases() {
  std::vector<KvcacheCase> cases;
  const std::vector<DecodeKernel> kernels = built_decode_kernels();
  if (kernels.empty()) return cases;
  KvcacheCase base;
  base.dtype = kernels.front().dtype;
  base.head_dim = kernels.front().head_dim;
  base.seqlen_new = 2;
  base.capacity = 512;
  base.cache_seqlens = {100, 200, 300};
  base.bad_sequence = 1;
  for (int splits : {1, 4}) {
    for (BadValue bad : {BadValue::seqlen_past_capacity, BadValue::negative_seqlen, BadValue::batch_idx_out_of_range,
                         BadValue::page_out_of_range}) {
      KvcacheCase c = base;
      c.bad = bad;
      c.num_splits = splits;
      c.cache_batch_idx = bad == BadValue::batch_idx_out_of_range;
      c.page_size = bad == BadValue::page_out_of_range || bad == BadValue::negative_seqlen ? 64 : 0;
      cases.push_back(c);
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

}  // namespace
}  // namespace flash4::test
