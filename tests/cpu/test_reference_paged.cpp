// gather_pages (src/reference/paged.hpp): a paged cache gathered back into the dense layout the forward
// reference reads.
#include <gtest/gtest.h>

#include <stdexcept>
#include <vector>

#include "reference/paged.hpp"

namespace flash4::ref {
namespace {

// Three sequences of 5, 0 and 9 keys, one kv head of head_dim 2, pages of 4 rows; element value
// 100 * page + 10 * row + column, so every gathered element says where it came from.
struct Fixture {
  Problem problem{.batch = 3, .heads_q = 1, .heads_kv = 1, .head_dim = 2, .cu_seqlens_q = {0, 1, 2, 3},
                  .cu_seqlens_k = {0, 5, 5, 14}};
  PagedLayout layout{.page_size = 4, .num_pages = 6, .table_stride = 3, .block_table = {4, 0, -1, 9, 9, 9, 1, 5, 2}};
  std::vector<float> cache;

  Fixture() {
    for (int page = 0; page < layout.num_pages; ++page) {
      for (int row = 0; row < layout.page_size; ++row) {
        for (int column = 0; column < 2; ++column) cache.push_back(100.0f * page + 10.0f * row + column);
      }
    }
  }
};

TEST(ReferencePaged, GathersEachKeyFromItsPageAndRow) {
  const Fixture f;
  const std::vector<float> dense = gather_pages(f.problem, f.layout, f.cache);
  ASSERT_EQ(dense.size(), 14u * 2);
  // Sequence 0: keys 0-3 from page 4, key 4 from page 0 row 0; the entry -1 past its pages is never read.
  EXPECT_EQ(dense[f.problem.kv_index(0, 0, 0)], 400.0f);
  EXPECT_EQ(dense[f.problem.kv_index(0, 3, 0) + 1], 431.0f);
  EXPECT_EQ(dense[f.problem.kv_index(0, 4, 0)], 0.0f);
  // Sequence 2: keys 0-3 page 1, 4-7 page 5, 8 page 2 row 0.
  EXPECT_EQ(dense[f.problem.kv_index(2, 2, 0)], 120.0f);
  EXPECT_EQ(dense[f.problem.kv_index(2, 7, 0) + 1], 531.0f);
  EXPECT_EQ(dense[f.problem.kv_index(2, 8, 0)], 200.0f);
}

TEST(ReferencePaged, AnEntryOutsideTheCacheGathersZeros) {
  Fixture f;
  f.layout.block_table[7] = 6;  // sequence 2's second page: keys 4-7
  const std::vector<float> dense = gather_pages(f.problem, f.layout, f.cache);
  for (int key = 4; key < 8; ++key) EXPECT_EQ(dense[f.problem.kv_index(2, key, 0) + 1], 0.0f) << key;
  EXPECT_EQ(dense[f.problem.kv_index(2, 8, 0)], 200.0f);
}

TEST(ReferencePaged, RefusesATableOrCacheThatCannotHoldTheProblem) {
  Fixture f;
  f.layout.table_stride = 2;  // sequence 2 needs 3 pages
  EXPECT_THROW(gather_pages(f.problem, f.layout, f.cache), std::invalid_argument);
  Fixture g;
  g.cache.pop_back();
  EXPECT_THROW(gather_pages(g.problem, g.layout, g.cache), std::invalid_argument);
}

}  // namespace
}  // namespace flash4::ref
