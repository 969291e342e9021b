// The block ranges of mask.hpp against brute force over every (row, key) pair: the forward's key-block
// range per query block and the backward's query-block range per key block, with their unmasked parts.
#include <gtest/gtest.h>

#include <tuple>
#include <vector>

#include "kernels/common/mask.hpp"

namespace flash4 {
namespace {

struct MaskCase {
  int seqlen_q, seqlen_k, left, right;
};

const MaskCase kCases[] = {{1, 1, -1, -1},     {17, 17, -1, 0},   {113, 239, -1, 0}, {239, 113, -1, 0},
                           {300, 300, 40, 0},  {300, 257, 10, 7}, {64, 1000, -1, -1}, {1000, 64, -1, 0},
                           {130, 130, 0, 0},   {200, 190, -1, 3}, {77, 500, 100, -1}, {500, 77, 5, 5}};

bool visible(const MaskSpec& m, int row, int key) { return row < m.seqlen_q && key_visible(m, row, key); }

TEST(MaskRanges, KeyBlocksOfEachQueryBlockMatchBruteForce) {
  for (const MaskCase& c : kCases) {
    const MaskSpec mask{c.seqlen_q, c.seqlen_k, c.left, c.right};
    for (int block_m : {64, 128}) {
      for (int block_n : {80, 128}) {
        for (int m0 = 0; m0 < c.seqlen_q; m0 += block_m) {
          const KeyBlockRange range = key_block_range(mask, m0, block_m, block_n);
          for (int n = 0; n * block_n < c.seqlen_k; ++n) {
            bool any = false, all = true;
            for (int row = m0; row < std::min(m0 + block_m, c.seqlen_q); ++row) {
              for (int key = n * block_n; key < (n + 1) * block_n; ++key) {
                const bool v = visible(mask, row, key);
                any |= v;
                all &= v;
              }
            }
            SCOPED_TRACE(testing::Message() << "Sq " << c.seqlen_q << " Sk " << c.seqlen_k << " window (" << c.left
                                            << ", " << c.right << ") m0 " << m0 << " key block " << n);
            EXPECT_EQ(any, n >= range.begin && n < range.end);
            if (n >= range.begin && n < range.end && !range.needs_mask(n)) {
              EXPECT_TRUE(all);
            }
          }
        }
      }
    }
  }
}

TEST(MaskRanges, QueryBlocksOfEachKeyBlockMatchBruteForce) {
  for (const MaskCase& c : kCases) {
    const MaskSpec mask{c.seqlen_q, c.seqlen_k, c.left, c.right};
    for (int block_m : {64, 128}) {
      for (int block_n : {128}) {
        for (int n0 = 0; n0 < c.seqlen_k; n0 += block_n) {
          const QueryBlockRange range = query_block_range(mask, n0, block_n, block_m);
          int unmasked_blocks = 0;
          for (int m = 0; m * block_m < c.seqlen_q; ++m) {
            bool any = false, all = true;
            for (int row = m * block_m; row < std::min((m + 1) * block_m, c.seqlen_q); ++row) {
              for (int key = n0; key < n0 + block_n; ++key) {
                const bool v = visible(mask, row, key);
                any |= v;
                all &= v;
              }
            }
            SCOPED_TRACE(testing::Message() << "Sq " << c.seqlen_q << " Sk " << c.seqlen_k << " window (" << c.left
                                            << ", " << c.right << ") n0 " << n0 << " query block " << m);
            const bool in_range = m >= range.begin && m < range.end;
            EXPECT_EQ(any, in_range);
            if (in_range && !range.needs_mask(m)) {
              EXPECT_TRUE(all);
              ++unmasked_blocks;
            }
          }
          // A full causal / unbounded problem must not mask everything: the fast path has to be taken.
          if (c.left < 0 && c.right < 0 && n0 + block_n <= c.seqlen_k) {
            EXPECT_EQ(unmasked_blocks, range.count());
          }
        }
      }
    }
  }
}

// kCases plus lengths and windows at the limit the span arithmetic promises (2^31 - 1 - 128).
std::vector<MaskCase> span_cases() {
  constexpr int kLongest = 2147483647 - 128;
  std::vector<MaskCase> cases(std::begin(kCases), std::end(kCases));
  cases.push_back({kLongest, kLongest, -1, 0});
  cases.push_back({5, kLongest, kLongest - 10, 3});
  cases.push_back({kLongest, 7, -1, kLongest});
  cases.push_back({kLongest, 78, -1, 0});
  cases.push_back({kLongest, kLongest, kLongest, kLongest});
  return cases;
}

// key_visible in 64-bit arithmetic: at these lengths and windows the int version itself overflows.
bool visible_exact(const MaskSpec& m, long long row, long long key) {
  const long long diagonal = row + (long long)m.seqlen_k - m.seqlen_q;
  return key < m.seqlen_k && (m.window_right < 0 || key <= diagonal + m.window_right) &&
         (m.window_left < 0 || key >= diagonal - m.window_left);
}

// A run must lie inside the fragment's column numbers, begin <= end even when empty: the kernels pack
// its bounds into fields and shift by them.
void expect_run_in_fragment(const FragmentRun& run, int count) {
  ASSERT_LE(0, run.begin);
  ASSERT_LE(run.begin, run.end);
  ASSERT_LE(run.end, count / 4);
}

// The backward's masked steps take each key's visible entries as a run of fragment columns
// (rows_seeing_key, then fragment_run): for keys near the edges (some past seqlen_k) and blocks starting
// before, on and after the diagonals, the span and the run must agree with key_visible (computed in 64
// bits) on every row. Lengths and windows at the limit check that the offsets neither overflow nor lose
// the answer.
TEST(MaskRanges, RowSpanOfEachKeyMatchesKeyVisible) {
  for (const MaskCase& c : span_cases()) {
    const MaskSpec mask{c.seqlen_q, c.seqlen_k, c.left, c.right};
    const int diagonal = mask.diagonal();
    for (int count : {64, 128}) {
      // Blocks near the diagonal of the first and last keys, where the spans start and end.
      const int interesting_rows[] = {0, c.seqlen_q - 1, -diagonal, c.seqlen_k - 1 - diagonal,
                                      c.seqlen_q / 2, -diagonal + c.seqlen_k / 2};
      for (int anchor : interesting_rows) {
        for (int shift : {-count - 3, -count / 2, -5, 0, 3, count / 3}) {
          const long long row0_wide = (long long)anchor + shift;
          if (row0_wide < 0 || row0_wide > (long long)c.seqlen_q + count) continue;  // the kernels' rows
          const int row0 = int(row0_wide);
          for (int key_offset : {-2, -1, 0, 1, 5}) {
            for (int key_anchor : {0, c.seqlen_k - 1, row0 + diagonal, row0 + diagonal + count - 1}) {
              const long long key_wide = (long long)key_anchor + key_offset;
              if (key_wide < 0 || key_wide > 2100000000LL) continue;
              const int key = int(key_wide);
              const RowSpan span = rows_seeing_key(mask, key, row0, count);
              const FragmentRun run = fragment_run(span);
              expect_run_in_fragment(run, count);
              for (int r = 0; r < count; ++r) {
                const bool expected = visible_exact(mask, (long long)row0 + r, key);
                ASSERT_EQ(span.contains(r), expected)
                    << "Sq " << c.seqlen_q << " Sk " << c.seqlen_k << " window (" << c.left << ", " << c.right
                    << ") key " << key << " row " << row0 + r;
                // A thread's fragment columns (offset 8 k + j, numbered 2 k + j) in the run.
                if (r % 8 < 2) {
                  const int number = 2 * (r / 8) + r % 8;
                  ASSERT_EQ(number >= run.begin && number < run.end, expected)
                      << "fragment column " << r << " of the run [" << run.begin << ", " << run.end << ") for key " << key
                      << " rows from " << row0;
                }
              }
            }
          }
        }
      }
    }
  }
}

// The forward's masked key blocks take each row's visible keys as a run (keys_seen_by_row), which every
// thread turns into a bit per accumulator column it holds (first column 2 (lane % 4), then fragment_run),
// exactly as softmax.cuh does: for rows near the diagonals of the first and last keys and blocks before,
// on and after them, the bits must agree with key_visible (in 64 bits) on every column of every thread,
// at lengths and windows up to the limit the arithmetic promises.
TEST(MaskRanges, KeySpanOfEachRowMatchesKeyVisible) {
  for (const MaskCase& c : span_cases()) {
    const MaskSpec mask{c.seqlen_q, c.seqlen_k, c.left, c.right};
    const long long diagonal = mask.diagonal();
    for (int count : {80, 112, 128}) {
      const long long interesting_rows[] = {0, c.seqlen_q - 1LL, -diagonal, c.seqlen_k - 1 - diagonal, c.seqlen_q / 2,
                                            (long long)c.seqlen_q + count - 1};
      for (long long anchor : interesting_rows) {
        for (int shift : {-3, -1, 0, 2, 40}) {
          const long long row_wide = anchor + shift;
          if (row_wide < 0 || row_wide >= (long long)c.seqlen_q + count) continue;  // the kernels' rows
          const int row = int(row_wide);
          const long long col_anchors[] = {0, row + diagonal, row + diagonal - count / 2, c.seqlen_k - 1LL,
                                           row + diagonal - c.left, row + diagonal + c.right};
          for (long long col_anchor : col_anchors) {
            for (int col_shift : {-count - 1, -7, 0, 5}) {
              const long long col0_wide = col_anchor + col_shift;
              if (col0_wide < 0 || col0_wide + count > 2147483647LL) continue;
              const int col0 = int(col0_wide);
              const RowSpan span = keys_seen_by_row(mask, row, col0, count);
              for (int offset = 0; offset < count; ++offset) {
                ASSERT_EQ(span.contains(offset), visible_exact(mask, row, (long long)col0 + offset))
                    << "Sq " << c.seqlen_q << " Sk " << c.seqlen_k << " window (" << c.left << ", " << c.right
                    << ") row " << row << " key " << (long long)col0 + offset;
              }
              for (int quad_lane = 0; quad_lane < 4; ++quad_lane) {
                const int first_column = 2 * quad_lane;
                const FragmentRun run = fragment_run(keys_seen_by_row(mask, row, col0 + first_column, count - first_column));
                ASSERT_LE(0, run.begin);
                ASSERT_LE(run.begin, run.end);
                ASSERT_LE(run.end, count / 4);
                for (int number = 0; number < count / 4; ++number) {
                  const int column = first_column + 8 * (number / 2) + number % 2;
                  ASSERT_EQ(number >= run.begin && number < run.end,
                            visible_exact(mask, row, (long long)col0 + column))
                      << "row " << row << " key " << (long long)col0 + column << " lane % 4 = " << quad_lane;
                }
              }
            }
          }
        }
      }
    }
  }
}

// The deterministic backward orders the dQ reduce-adds of query block m by key block, counting turns from
// key_block_range(m).begin: that needs the key blocks whose query_block_range holds m to be exactly
// [key_block_range(m).begin, key_block_range(m).end), with the backward's block sizes (64 x 128).
TEST(MaskRanges, BackwardContributorsOfEachQueryBlockAreTheForwardKeyRange) {
  constexpr int kBlockM = 64;
  constexpr int kBlockN = 128;
  for (const MaskCase& c : kCases) {
    const MaskSpec mask{c.seqlen_q, c.seqlen_k, c.left, c.right};
    for (int m = 0; m * kBlockM < c.seqlen_q; ++m) {
      const KeyBlockRange keys = key_block_range(mask, m * kBlockM, kBlockM, kBlockN);
      for (int n = 0; n * kBlockN < c.seqlen_k; ++n) {
        const QueryBlockRange queries = query_block_range(mask, n * kBlockN, kBlockN, kBlockM);
        const bool contributes = m >= queries.begin && m < queries.end;
        EXPECT_EQ(contributes, n >= keys.begin && n < keys.end)
            << "Sq " << c.seqlen_q << " Sk " << c.seqlen_k << " window (" << c.left << ", " << c.right
            << ") query block " << m << " key block " << n;
      }
    }
  }
}

}  // namespace
}  // namespace flash4
