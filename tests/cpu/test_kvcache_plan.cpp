// The flash4_kvcache host plan (src/host/kvcache_plan.hpp) and what it shares with the decode kernels: the
// page-size division, the row tiling, the split-KV heuristic and the workspace of the split partials.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <random>

#include "flash4/flash4_kvcache.h"
#include "host/kvcache_plan.hpp"
#include "kernels/common/decode_work.hpp"
#include "kernels/common/fast_divmod.hpp"
#include "launch/decode_config.hpp"

namespace flash4 {
namespace {

constexpr int kH200Sms = 132;

TEST(FastDivmod, MatchesDivisionExhaustivelyForSmallDivisorsAndNumerators) {
  for (uint32_t divisor = 1; divisor <= 300; ++divisor) {
    const FastDivmod f = FastDivmod::make(divisor);
    for (uint32_t n = 0; n < 5000; ++n) {
      uint32_t q = 0, r = 0;
      f.divmod(n, q, r);
      ASSERT_EQ(q, n / divisor) << n << " / " << divisor;
      ASSERT_EQ(r, n % divisor) << n << " % " << divisor;
    }
  }
}

TEST(FastDivmod, MatchesDivisionNearTheTopOfTheRange) {
  std::mt19937 engine(12345);
  std::uniform_int_distribution<uint32_t> numerator(0, (1u << 31) - 1);
  for (uint32_t divisor : {1u, 2u, 3u, 7u, 16u, 48u, 64u, 100u, 255u, 256u, 1000u, 65537u, (1u << 30) + 1, (1u << 31) - 1}) {
    const FastDivmod f = FastDivmod::make(divisor);
    for (uint32_t n : {0u, 1u, divisor - 1, divisor, (1u << 31) - 1, (1u << 31) - 2, (1u << 31) - divisor}) {
      ASSERT_EQ(f.div(n), n / divisor) << n << " / " << divisor;
    }
    for (int i = 0; i < 20000; ++i) {
      const uint32_t n = numerator(engine);
      ASSERT_EQ(f.div(n), n / divisor) << n << " / " << divisor;
    }
  }
}

TEST(DecodeConfig, RowTilesCoverTheRowsWithADivisorOfTheWarps) {
  for (int rows = 1; rows <= 200; ++rows) {
    const int tiles = decode::row_tiles_for(rows);
    EXPECT_EQ(decode::kWarps % tiles, 0) << rows;
    if (rows <= decode::kMaxRowsPerCta) {
      EXPECT_GE(tiles * decode::kTileRows, rows) << rows;
    }
  }
  EXPECT_EQ(decode::row_tiles_for(8), 1);   // decoding, 8 query heads per KV head
  EXPECT_EQ(decode::row_tiles_for(32), 2);  // 4 speculative tokens x 8 heads
  EXPECT_EQ(decode::row_tiles_for(33), 4);
}

// Shared memory and stages of every kernel width: the CTAs meant to share an SM fit on it (228 KiB, 1 KiB
// kept per CTA, 128 bytes of alignment slack), and a ring keeps at least two blocks in flight.
template <int kWidth>
void expect_fits(int ctas_per_sm, int stages) {
  using Cfg = decode::Config<kWidth>;
  constexpr int kPerSm = 228 * 1024, kMaxPerCta = 227 * 1024, kReservedPerCta = 1024, kSlack = 128;
  EXPECT_EQ(Cfg::kCtasPerSm, ctas_per_sm) << kWidth;
  EXPECT_EQ(Cfg::kStages, stages) << kWidth;
  EXPECT_LE(Cfg::kSharedBytes + kSlack, kMaxPerCta) << kWidth;
  EXPECT_LE(ctas_per_sm * (Cfg::kSharedBytes + kSlack + kReservedPerCta), kPerSm) << kWidth;
  EXPECT_EQ(Cfg::kChunksPerRow % 8, 0) << kWidth << ": the swizzle's XOR with row % 8 stays inside a row";
  // A ring with the stage count plus one does not fit: the stages take what the budget allows.
  EXPECT_GT(ctas_per_sm * (Cfg::kSharedBytes + 2 * Cfg::kTileBytes + kSlack + kReservedPerCta), kPerSm) << kWidth;
}

TEST(DecodeConfig, EveryWidthFitsItsCtasPerSmWithEnoughStages) {
  expect_fits<64>(2, 6);
  expect_fits<128>(2, 3);
  expect_fits<192>(1, 4);
  expect_fits<256>(1, 3);
  // Two CTAs of width 192 with their Q tiles would not fit even with the smallest ring.
  EXPECT_GT(2 * (3 * 2 * decode::Config<192>::kTileBytes + decode::Config<192>::kQBytes), 228 * 1024);
}

TEST(DecodeConfig, KernelWidthsAreWholeSwizzleAtomsUpTo256) {
  for (int width = 0; width <= 320; width += 8) {
    EXPECT_EQ(decode::is_kernel_width(width), width == 64 || width == 128 || width == 192 || width == 256) << width;
  }
}

// A wave is ctas_per_sm (2 up to width 128) CTAs per SM: 264 on the H200's 132 SMs.
TEST(SplitHeuristic, LeavesAFullGridAlone) {
  EXPECT_EQ(host::choose_splits(2 * kH200Sms, 2048, kH200Sms, 2), 1);
  EXPECT_EQ(host::choose_splits(128 * 8, 2048, kH200Sms, 2), 1);  // batch 128 x 8 KV heads
  EXPECT_EQ(host::choose_splits(212, 2048, kH200Sms, 2), 1);      // >= 80% of a wave
  EXPECT_EQ(host::choose_splits(16 * 8, 2048, kH200Sms, 2), 2);   // batch 16: one CTA per SM, split in two
}

// Wider kernels run one CTA per SM, so a wave is half as many CTAs.
TEST(SplitHeuristic, OneCtaPerSmHalvesTheWave) {
  EXPECT_EQ(host::choose_splits(16 * 8, 2048, kH200Sms, 1), 1);  // 128 CTAs: 97% of a 132-CTA wave
  EXPECT_EQ(host::choose_splits(64, 2048, kH200Sms, 1), 2);
  EXPECT_LE(host::choose_splits(1, 1 << 20, 16, 1), 16);  // never more splits than one wave holds
}

TEST(SplitHeuristic, SplitsASmallBatchToFillTheGpu) {
  // batch 1 x 8 KV heads at 128K keys: 29 splits make 232 CTAs, 88% of a wave, the first count within 85% of
  // the best fill (33 splits: exactly one wave).
  EXPECT_EQ(host::choose_splits(8, 2048, kH200Sms, 2), 29);
  // batch 8 x 8 KV heads: 4 splits, 256 CTAs.
  EXPECT_EQ(host::choose_splits(64, 2048, kH200Sms, 2), 4);
  for (std::int64_t ctas : {1, 2, 5, 8, 13, 32, 64, 100, 200}) {
    const int splits = host::choose_splits(ctas, 4096, kH200Sms, 2);
    EXPECT_GT(splits, 1) << ctas;
    EXPECT_GE(ctas * splits, static_cast<std::int64_t>(0.8 * kH200Sms)) << ctas << " CTAs, " << splits << " splits";
  }
}

TEST(SplitHeuristic, NeverSplitsBelowFourBlocksPerSplitNorBeyondTheLimits) {
  EXPECT_EQ(host::choose_splits(8, 4, kH200Sms, 2), 1);  // 256 keys: nothing to share
  EXPECT_EQ(host::choose_splits(8, 8, kH200Sms, 2), 2);  // 512 keys: at most 2 splits of 4 blocks
  // One CTA: the fill grows with the splits up to kMaxSplits (128 of a 264-CTA wave); the first within 85% is 109.
  EXPECT_EQ(host::choose_splits(1, 1 << 20, kH200Sms, 2), 109);
  EXPECT_LE(host::choose_splits(1, 1 << 20, 16, 2), 2 * 16);  // never more splits than one wave holds
  for (int blocks = 1; blocks <= 64; ++blocks) {
    const int splits = host::choose_splits(1, blocks, kH200Sms, 2);
    EXPECT_TRUE(splits == 1 || blocks / splits >= host::kMinBlocksPerSplit) << blocks << " blocks, " << splits;
  }
}

TEST(DecodeWork, SplitSharesPartitionTheBlocksInOrder) {
  for (int begin = 0; begin < 5; ++begin) {
    for (int end = 0; end < 40; ++end) {
      for (int splits = 1; splits <= 20; ++splits) {
        int next = begin;
        for (int split = 0; split < splits; ++split) {
          const decode::BlockShare share = decode::split_share(begin, end, splits, split);
          ASSERT_LE(share.begin, share.end);
          if (share.begin == share.end) continue;  // empty shares may sit anywhere
          ASSERT_EQ(share.begin, next) << begin << ".." << end << " / " << splits << ", split " << split;
          ASSERT_LE(share.end - share.begin, (end - begin + splits - 1) / splits);
          next = share.end;
        }
        ASSERT_EQ(next, std::max(begin, end)) << "the shares cover the blocks";
      }
    }
  }
}

TEST(DecodeWork, SequenceValidityNeverOverflows) {
  constexpr int kMax = std::numeric_limits<int>::max(), kMin = std::numeric_limits<int>::min();
  EXPECT_TRUE(decode::sequence_is_valid(0, 0, 1, false, 0, 1));
  EXPECT_TRUE(decode::sequence_is_valid(10, 6, 16, true, -7, 0));  // paged: cache_seq is not used
  EXPECT_TRUE(decode::sequence_is_valid(0, 16, 16, false, 2, 3));
  EXPECT_FALSE(decode::sequence_is_valid(1, 16, 16, false, 2, 3));
  EXPECT_FALSE(decode::sequence_is_valid(-1, 0, 16, false, 0, 3));
  EXPECT_FALSE(decode::sequence_is_valid(kMax, 1, kMax - 128, true, 0, 0));
  EXPECT_FALSE(decode::sequence_is_valid(kMin, 1, 16, true, 0, 0));
  EXPECT_FALSE(decode::sequence_is_valid(0, 0, 16, false, 3, 3));
  EXPECT_FALSE(decode::sequence_is_valid(0, 0, 16, false, -1, 3));
  EXPECT_FALSE(decode::sequence_is_valid(0, 0, 16, false, kMin, 3));
}

flash4_kvcache_params decode_call(int batch, int seqlen_q, int capacity, int num_splits) {
  flash4_kvcache_params p{};
  p.batch = batch;
  p.seqlen_q = seqlen_q;
  p.heads_q = 32;
  p.heads_kv = 8;
  p.head_dim = 128;
  p.cache_batch = batch;
  p.cache_seqlen = capacity;
  p.num_splits = num_splits;
  return p;
}

TEST(KvcachePlan, PacksTheQueryHeadsOfAKvHead) {
  const host::KvcachePlan one = host::plan_kvcache(decode_call(4, 1, 1024, 1), 128, kH200Sms);
  EXPECT_EQ(one.group, 4);
  EXPECT_EQ(one.rows, 4);
  EXPECT_EQ(one.row_tiles, 1);
  EXPECT_EQ(one.row_blocks, 1);
  EXPECT_EQ(one.ctas, 4 * 8);
  const host::KvcachePlan many = host::plan_kvcache(decode_call(2, 40, 1024, 1), 128, kH200Sms);  // 160 rows
  EXPECT_EQ(many.row_tiles, 4);
  EXPECT_EQ(many.row_blocks, 3);
  EXPECT_EQ(many.ctas, 3 * 8 * 2);
}

TEST(KvcachePlan, AskedSplitsAreCappedByTheKeyBlocks) {
  EXPECT_EQ(host::plan_kvcache(decode_call(1, 1, 1000, 64), 128, kH200Sms).splits, 16);  // 16 blocks of 64
  EXPECT_EQ(host::plan_kvcache(decode_call(1, 1, 1000, 5), 128, kH200Sms).splits, 5);
  EXPECT_EQ(host::plan_kvcache(decode_call(1, 1, 10, 3), 128, kH200Sms).splits, 1);
}

TEST(KvcachePlan, WorkspaceHoldsEverySplitsPartialsAlignedAndNothingUnsplit) {
  const host::KvcachePlan unsplit = host::plan_kvcache(decode_call(2, 3, 4096, 1), 128, kH200Sms);
  EXPECT_EQ(unsplit.workspace_bytes, 0u);
  const host::KvcachePlan split = host::plan_kvcache(decode_call(2, 3, 4096, 7), 128, kH200Sms);
  ASSERT_EQ(split.splits, 7);
  const std::size_t rows = 7u * 2 * 3 * 32;
  EXPECT_EQ(split.partial_o_bytes, rows * 128 * 4);
  EXPECT_EQ(split.partial_lse_offset % 256, 0u);
  EXPECT_GE(split.partial_lse_offset, split.partial_o_bytes);
  EXPECT_GE(split.workspace_bytes, split.partial_lse_offset + rows * 4);
  EXPECT_EQ(split.workspace_bytes % 256, 0u);
}

TEST(KvcachePlan, PartialsHoldTheValueHeadDimAndTheWaveFollowsTheWidth) {
  flash4_kvcache_params p = decode_call(2, 3, 4096, 7);
  p.head_dim = 192;
  p.head_dim_v = 128;
  const host::KvcachePlan split = host::plan_kvcache(p, 192, kH200Sms);
  EXPECT_EQ(split.width, 192);
  EXPECT_EQ(split.partial_o_bytes, 7u * 2 * 3 * 32 * 128 * 4);
  p.head_dim_v = 0;  // equal to head_dim
  EXPECT_EQ(host::plan_kvcache(p, 192, kH200Sms).partial_o_bytes, 7u * 2 * 3 * 32 * 192 * 4);
  // batch 16 x 8 KV heads: two CTAs per SM at width 128 leave half a wave idle, one per SM at 256 does not.
  p = decode_call(16, 1, 2048 * 64, 0);
  EXPECT_EQ(host::plan_kvcache(p, 128, kH200Sms).splits, 2);
  EXPECT_EQ(host::plan_kvcache(p, 256, kH200Sms).splits, 1);
}

TEST(KvcachePlan, HeuristicSplitsFollowTheSmCountAndPagedCapacity) {
  flash4_kvcache_params p = decode_call(1, 1, 0, 0);
  int table[1] = {0};
  p.block_table = table;
  p.max_pages_per_seq = 2048;
  p.page_size = 64;  // 128K keys
  EXPECT_EQ(host::kvcache_capacity(p), 131072);
  EXPECT_TRUE(host::kvcache_plan_needs_device(p));
  EXPECT_EQ(host::plan_kvcache(p, 128, kH200Sms).splits, 29);
  EXPECT_EQ(host::plan_kvcache(p, 128, 16).splits, 4);  // 8 KV heads x 4 = one wave of 16 SMs x 2
  p.num_splits = 3;
  EXPECT_FALSE(host::kvcache_plan_needs_device(p));
}

}  // namespace
}  // namespace flash4
