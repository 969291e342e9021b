// The kvcache reference (src/reference/kvcache.hpp) against the forward reference it builds on: a full
// unpaged cache is plain attention, a paged cache is its scattered copy, appends land where they should and
// nowhere else, and device-side values it cannot model are refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <stdexcept>
#include <vector>

#include "reference/kvcache.hpp"
#include "reference/reference.hpp"

namespace flash4::ref {
namespace {

constexpr std::uint64_t kSeed = 20261205;

KvcacheProblem small_problem() {
  KvcacheProblem p;
  p.batch = 3;
  p.seqlen_q = 2;
  p.heads_q = 4;
  p.heads_kv = 2;
  p.head_dim = 8;
  p.scale = 0.3;
  p.cache_batch = 3;
  p.cache_seqlen = 40;
  return p;
}

struct Tensors {
  std::vector<float> q, k_cache, v_cache, k_new, v_new;
  KvcacheInputs inputs() const { return {q, k_cache, v_cache, k_new, v_new}; }
};

Tensors random_tensors(const KvcacheProblem& p, std::uint64_t seed = kSeed) {
  return {random_tensor(p.q_elements(), Precision::bf16, seed),
          random_tensor(p.k_cache_elements(), Precision::bf16, seed + 1),
          random_tensor(p.v_cache_elements(), Precision::bf16, seed + 2),
          random_tensor(p.k_new_elements(), Precision::bf16, seed + 3),
          random_tensor(p.v_new_elements(), Precision::bf16, seed + 4)};
}

// The same logical cache as `unpaged` (cache_batch == batch, no cache_batch_idx), scattered into pages of
// `page_size` rows in a shuffled order, with spare pages and -1 entries past each sequence's pages.
struct PagedCopy {
  KvcacheProblem problem;
  std::vector<float> k_cache, v_cache;
};
PagedCopy paged_copy(const KvcacheProblem& unpaged, const Tensors& t, int page_size) {
  PagedCopy c{unpaged, {}, {}};
  KvcacheProblem& p = c.problem;
  p.page_size = page_size;
  p.max_pages_per_seq = (unpaged.cache_seqlen + page_size - 1) / page_size;
  p.num_pages = unpaged.batch * p.max_pages_per_seq + 5;
  std::vector<int> order(p.num_pages);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937(kSeed));
  p.block_table.assign(static_cast<std::size_t>(p.batch) * p.max_pages_per_seq, -1);
  c.k_cache.assign(p.k_cache_elements(), std::numeric_limits<float>::quiet_NaN());
  c.v_cache.assign(p.v_cache_elements(), std::numeric_limits<float>::quiet_NaN());
  const std::size_t d = p.head_dim, dv = p.dim_v();
  int next = 0;
  for (int b = 0; b < p.batch; ++b) {
    for (int page = 0; page * page_size < p.keys(b); ++page) {
      p.block_table[static_cast<std::size_t>(b) * p.max_pages_per_seq + page] = order[next++];
    }
    for (int key = 0; key < p.capacity() && key < unpaged.cache_seqlen; ++key) {
      if (key / page_size >= (p.keys(b) + page_size - 1) / page_size) break;
      for (int h = 0; h < p.heads_kv; ++h) {
        std::copy_n(t.k_cache.begin() + unpaged.cache_row(b, key, h) * d, d,
                    c.k_cache.begin() + p.cache_row(b, key, h) * d);
        std::copy_n(t.v_cache.begin() + unpaged.cache_row(b, key, h) * dv, dv,
                    c.v_cache.begin() + p.cache_row(b, key, h) * dv);
      }
    }
  }
  return c;
}

TEST(KvcacheReference, FullUnpagedCacheIsPlainAttention) {
  KvcacheProblem p = small_problem();
  p.causal = true;
  const Tensors t = random_tensors(p);
  const ForwardResult64 got = kvcache_fp64(p, t.inputs());
  Problem plain{.batch = p.batch, .seqlen_q = p.seqlen_q, .seqlen_k = p.cache_seqlen, .heads_q = p.heads_q,
                .heads_kv = p.heads_kv, .head_dim = p.head_dim, .scale = p.scale, .causal = true};
  const ForwardResult64 want = forward_fp64(plain, t.q, t.k_cache, t.v_cache);
  EXPECT_EQ(got.o, want.o);
  EXPECT_EQ(got.lse, want.lse);  // both (batch, heads_q, seqlen_q)
}

TEST(KvcacheReference, ValueHeadDimOfItsOwnIsTheForwardsHeadDimV) {
  for (int dv : {4, 16}) {
    KvcacheProblem p = small_problem();
    p.head_dim_v = dv;
    const Tensors t = random_tensors(p);
    ASSERT_EQ(t.v_cache.size(), p.k_cache_elements() / p.head_dim * dv);
    const ForwardResult64 got = kvcache_fp64(p, t.inputs());
    Problem plain{.batch = p.batch, .seqlen_q = p.seqlen_q, .seqlen_k = p.cache_seqlen, .heads_q = p.heads_q,
                  .heads_kv = p.heads_kv, .head_dim = p.head_dim, .head_dim_v = dv, .scale = p.scale};
    const ForwardResult64 want = forward_fp64(plain, t.q, t.k_cache, t.v_cache);
    ASSERT_EQ(got.o.size(), p.o_elements()) << dv;
    EXPECT_EQ(got.o, want.o) << dv;
    EXPECT_EQ(got.lse, want.lse) << dv;
  }
}

TEST(KvcacheReference, AppendWritesOnlyTheNewRows) {
  KvcacheProblem p = small_problem();
  p.head_dim_v = 16;  // v's rows twice as wide as k's
  p.seqlen_new = 3;
  p.cache_seqlens = {0, 17, 37};  // the last sequence fills its capacity
  const Tensors t = random_tensors(p);
  std::vector<float> k = t.k_cache, v = t.v_cache;
  append_new_rows(p, k, v, t.k_new, t.v_new);
  std::size_t changed = 0;
  for (std::size_t e = 0; e < k.size(); ++e) changed += k[e] != t.k_cache[e];
  for (std::size_t e = 0; e < v.size(); ++e) changed += v[e] != t.v_cache[e];
  for (int b = 0; b < p.batch; ++b) {
    for (int row = 0; row < p.seqlen_new; ++row) {
      for (int h = 0; h < p.heads_kv; ++h) {
        const std::size_t at = p.cache_row(b, p.cache_seqlens[b] + row, h);
        const std::size_t from = (static_cast<std::size_t>(b) * p.seqlen_new + row) * p.heads_kv + h;
        for (int d = 0; d < p.head_dim; ++d) ASSERT_EQ(k[at * p.head_dim + d], t.k_new[from * p.head_dim + d]);
        for (int d = 0; d < p.dim_v(); ++d) ASSERT_EQ(v[at * p.dim_v() + d], t.v_new[from * p.dim_v() + d]);
      }
    }
  }
  // Random normal values differ from what they replace (almost surely): every changed element is appended.
  const std::size_t appended = p.k_new_elements() + p.v_new_elements();
  EXPECT_LE(changed, appended);
  EXPECT_GE(changed, appended - 8);
}

TEST(KvcacheReference, AppendedKeysAreAttendedAfterTheCachedOnes) {
  KvcacheProblem p = small_problem();
  p.batch = 1;
  p.seqlen_new = 2;
  p.cache_seqlens = {5};
  const Tensors t = random_tensors(p);
  const GatheredKv before = gather_keys(p, t.k_cache, t.v_cache);
  ASSERT_EQ(before.problem.seq_k(0), 7);
  std::vector<float> k = t.k_cache, v = t.v_cache;
  append_new_rows(p, k, v, t.k_new, t.v_new);
  const GatheredKv after = gather_keys(p, k, v);
  const std::size_t row = static_cast<std::size_t>(p.heads_kv) * p.head_dim;
  // Keys 0..4 from the cache, 5..6 the appended rows, in order.
  EXPECT_TRUE(std::equal(after.k.begin(), after.k.begin() + 5 * row, t.k_cache.begin()));
  EXPECT_TRUE(std::equal(after.k.begin() + 5 * row, after.k.end(), t.k_new.begin()));
  EXPECT_TRUE(std::equal(after.v.begin() + 5 * row, after.v.end(), t.v_new.begin()));
}

TEST(KvcacheReference, PagedCacheEqualsItsUnpagedCopy) {
  KvcacheProblem p = small_problem();
  p.seqlen_new = 2;
  p.cache_seqlens = {0, 11, 38};
  p.window_left = 9;
  p.causal = true;
  const Tensors t = random_tensors(p);
  const ForwardResult64 want = kvcache_fp64(p, t.inputs());
  for (int page_size : {1, 3, 16, 64}) {
    SCOPED_TRACE("page_size " + std::to_string(page_size));
    const PagedCopy c = paged_copy(p, t, page_size);
    const ForwardResult64 got = kvcache_fp64(c.problem, {t.q, c.k_cache, c.v_cache, t.k_new, t.v_new});
    EXPECT_EQ(got.o, want.o);
    EXPECT_EQ(got.lse, want.lse);
  }
}

TEST(KvcacheReference, CacheBatchIdxPicksTheCacheSequence) {
  KvcacheProblem p = small_problem();
  p.cache_batch = 5;
  p.cache_batch_idx = {4, 0, 2};
  p.cache_seqlens = {10, 20, 30};
  const Tensors t = random_tensors(p);
  const ForwardResult64 got = kvcache_fp64(p, t.inputs());
  // Sequence 0 read cache row 4: the same as a problem whose row 0 holds row 4's keys.
  KvcacheProblem direct = p;
  direct.cache_batch_idx.clear();
  std::vector<float> k = t.k_cache, v = t.v_cache;
  const std::size_t rows = static_cast<std::size_t>(p.cache_seqlen) * p.heads_kv * p.head_dim;
  for (int b = 0; b < p.batch; ++b) {
    std::copy_n(t.k_cache.begin() + p.cache_batch_idx[b] * rows, rows, k.begin() + b * rows);
    std::copy_n(t.v_cache.begin() + p.cache_batch_idx[b] * rows, rows, v.begin() + b * rows);
  }
  const ForwardResult64 want = kvcache_fp64(direct, {t.q, k, v, t.k_new, t.v_new});
  EXPECT_EQ(got.o, want.o);
  EXPECT_EQ(got.lse, want.lse);
}

TEST(KvcacheReference, EmptyCacheWithoutAppendIsFullyMasked) {
  KvcacheProblem p = small_problem();
  p.cache_seqlens = {0, 4, 0};
  const ForwardResult64 got = kvcache_fp64(p, random_tensors(p).inputs());
  for (int h = 0; h < p.heads_q; ++h) {
    for (int i = 0; i < p.seqlen_q; ++i) {
      EXPECT_EQ(got.lse[(0 * p.heads_q + h) * p.seqlen_q + i], -std::numeric_limits<double>::infinity());
      EXPECT_TRUE(std::isfinite(got.lse[(1 * p.heads_q + h) * p.seqlen_q + i]));
    }
  }
  const std::size_t sequence = static_cast<std::size_t>(p.seqlen_q) * p.heads_q * p.head_dim;
  EXPECT_TRUE(std::all_of(got.o.begin(), got.o.begin() + sequence, [](double x) { return x == 0; }));
}

TEST(KvcacheReference, NaiveBaselineIsCloseToFp64) {
  KvcacheProblem p = small_problem();
  p.seqlen_new = 1;
  p.cache_seqlens = {3, 30, 12};
  p.softcap = 5;
  const Tensors t = random_tensors(p);
  const ForwardResult64 exact = kvcache_fp64(p, t.inputs());
  const ForwardResult32 naive = kvcache_naive(p, Precision::bf16, t.inputs());
  ASSERT_EQ(naive.o.size(), exact.o.size());
  double worst = 0;
  for (std::size_t e = 0; e < exact.o.size(); ++e) worst = std::max(worst, std::fabs(naive.o[e] - exact.o[e]));
  EXPECT_GT(worst, 0);      // the baseline does round
  EXPECT_LT(worst, 0.05);   // but only as bf16 does
}

TEST(KvcacheReference, RefusesDeviceValuesItCannotModel) {
  KvcacheProblem p = small_problem();
  p.seqlen_new = 2;
  p.cache_seqlens = {0, 39, 0};  // 39 + 2 > capacity 40
  EXPECT_THROW(validate(p), std::invalid_argument);
  p.cache_seqlens = {-1, 0, 0};
  EXPECT_THROW(validate(p), std::invalid_argument);
  p.cache_seqlens = {0, 0, 0};
  p.cache_batch = 5;
  p.cache_batch_idx = {0, 5, 1};
  EXPECT_THROW(validate(p), std::invalid_argument);
  KvcacheProblem paged = small_problem();
  const Tensors t = random_tensors(paged);
  paged.cache_seqlens = {10, 20, 30};
  PagedCopy c = paged_copy(paged, t, 16);
  EXPECT_NO_THROW(validate(c.problem));
  c.problem.block_table[1 * c.problem.max_pages_per_seq + 1] = c.problem.num_pages;  // a page sequence 1 uses
  EXPECT_THROW(validate(c.problem), std::invalid_argument);
  c.problem.block_table[1 * c.problem.max_pages_per_seq + 1] = 0;
  c.problem.block_table[0 * c.problem.max_pages_per_seq + 2] = -7;  // past sequence 0's keys: never looked at
  EXPECT_NO_THROW(validate(c.problem));
}

}  // namespace
}  // namespace flash4::ref
