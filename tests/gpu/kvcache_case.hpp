// One flash4_kvcache case run end to end on the GPU: random q, cache and new rows, the cache inside poisoned
// guard regions, O and LSE poisoned, the call through the C ABI, then O and LSE against the fp64 reference
// (tolerance rule of tests/tolerance.hpp) and the whole cache, bit for bit, against the reference's append.
// With `pad`, every tensor's rows are strided past their head dim and the padding poisoned (NaN): a kernel
// wider than the head dims must neither read it into a result nor write it.
// A case may plant one bad device-side value for one sequence; that sequence's outputs must then be NaN and
// its cache rows untouched (or, for a bad page, the page never read), and everything else as without it.
#pragma once

#include <gtest/gtest.h>

#include <ostream>
#include <string>
#include <vector>

#include "flash4/flash4.h"

namespace flash4::test {

enum class BadValue {
  none,
  seqlen_past_capacity,  // cache_seqlens[b] + seqlen_new > capacity
  negative_seqlen,       // cache_seqlens[b] < 0
  batch_idx_out_of_range,  // cache_batch_idx[b] == cache_batch (not paged)
  page_out_of_range,       // block_table entry of b's first page == num_pages (paged; page 0 holds cached keys only)
};

struct KvcacheCase {
  flash4_dtype dtype = FLASH4_DTYPE_BF16;
  int head_dim = 128;
  int head_dim_v = 0;  // of v_cache, v_new and o; 0: head_dim
  int pad = 0;         // poisoned elements past the head dim of every row of every tensor (a multiple of 8)
  int batch = 3;
  int seqlen_q = 1;
  int seqlen_new = 0;
  int heads_q = 8;
  int heads_kv = 2;
  int capacity = 256;             // keys per sequence
  int page_size = 0;              // 0: not paged
  std::vector<int> cache_seqlens = {};  // batch entries; empty: NULL (every sequence full, no append)
  bool causal = false;
  int window_left = -1;
  int window_right = -1;
  float softcap = 0.0f;
  int num_splits = 0;
  bool cache_batch_idx = false;  // not paged: sequences read a permutation of a larger cache
  bool lse = true;
  bool own_stream = false;  // launch on a created non-blocking stream instead of the legacy one
  BadValue bad = BadValue::none;
  int bad_sequence = 0;

  std::string name() const;
};

inline void PrintTo(const KvcacheCase& c, std::ostream* os) { *os << c.name(); }

struct KvcacheOutcome {
  ::testing::AssertionResult o = ::testing::AssertionSuccess();
  ::testing::AssertionResult lse = ::testing::AssertionSuccess();
  ::testing::AssertionResult cache = ::testing::AssertionSuccess();   // the cache after the call, bit for bit
  // Nothing written outside any tensor: its guard regions, and the padding of its rows past its head dim.
  ::testing::AssertionResult guards = ::testing::AssertionSuccess();
  ::testing::AssertionResult bad_rows = ::testing::AssertionSuccess();  // the bad sequence's outputs are NaN
};

KvcacheOutcome run_kvcache_case(const KvcacheCase& c);

}  // namespace flash4::test
