// The backward planner: grid size, folded causal window and the workspace layout (every array aligned,
// none overlapping, padded rows enough for a whole query block past each sequence's end).
#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "host/bwd_planner.hpp"

namespace flash4::host {
namespace {

flash4_bwd_params fixed_length(int batch, int seqlen_q, int seqlen_k, int heads_q, int heads_kv, int head_dim) {
  flash4_bwd_params p{};
  p.struct_size = sizeof(p);
  p.batch = batch;
  p.seqlen_q = seqlen_q;
  p.seqlen_k = seqlen_k;
  p.heads_q = heads_q;
  p.heads_kv = heads_kv;
  p.head_dim = head_dim;
  p.window_left = -1;
  p.window_right = -1;
  return p;
}

void expect_layout_sound(const BwdPlan& plan, const flash4_bwd_params& p) {
  const BwdWorkspaceLayout& ws = plan.workspace;
  for (std::size_t offset : {ws.dq_accum, ws.lse_log2, ws.dsum, ws.semaphores, ws.tile_counter, ws.total}) {
    EXPECT_EQ(offset % 256, 0u);
  }
  const std::size_t rows = std::size_t(p.heads_q) * plan.rows_per_head;
  EXPECT_EQ(ws.dq_accum_bytes, plan.dq_copies * rows * p.head_dim * sizeof(float));
  EXPECT_GE(ws.lse_log2, ws.dq_accum + ws.dq_accum_bytes);
  EXPECT_GE(ws.dsum, ws.lse_log2 + rows * sizeof(float));
  EXPECT_GE(ws.semaphores, ws.dsum + rows * sizeof(float));
  EXPECT_GE(ws.tile_counter, ws.semaphores + ws.semaphore_bytes);
  EXPECT_GE(ws.total, ws.tile_counter + sizeof(int));
  EXPECT_EQ(ws.semaphore_bytes, plan.dq_copies * std::size_t(p.heads_q) * p.batch * plan.m_blocks_max * sizeof(int));
}

TEST(BwdPlanner, FixedLengthPadsEachSequenceToWholeQueryBlocks) {
  const flash4_bwd_params p = fixed_length(3, 239, 1000, 8, 2, 128);
  const BwdPlan plan = plan_backward(p);
  EXPECT_EQ(plan.m_blocks_max, 4);                  // ceil(239 / 64)
  EXPECT_EQ(plan.n_blocks_max, 8);                  // ceil(1000 / 128)
  EXPECT_EQ(plan.num_tiles, 8 * 3 * 2);             // key blocks x sequences x kv heads
  EXPECT_EQ(plan.rows_per_head, 3LL * 256);         // 239 rounded up to 256, per sequence
  expect_layout_sound(plan, p);
}

// The persistent grid: no more CTAs than tiles or SMs (deterministic mode needs every CTA resident), at
// least one. The D = 64 softcap kernel runs one CTA per tile (bwd_persistent_kernel); every other kernel is
// persistent.
TEST(BwdPlanner, OnlyTheD64SoftcapKernelIsNotPersistent) {
  for (int d : {64, 96, 128, 192, 256}) {
    EXPECT_TRUE(bwd_persistent_kernel(d, false)) << d;
    EXPECT_EQ(bwd_persistent_kernel(d, true), d != 64) << d;
    const BwdPlan plan = plan_backward(fixed_length(2, 4096, 4096, 8, 2, d));
    const int tiles = plan.num_tiles;
    EXPECT_EQ(bwd_grid_ctas(plan, 132, true), d == 64 ? tiles : std::min(tiles, 132)) << d;
  }
}

TEST(BwdPlanner, PersistentGridIsTheSmallerOfTilesAndSms) {
  constexpr int kSms = 132;
  for (int d : {64, 128, 256}) {
    for (int seqlen : {1, 300, 4096, 16384}) {
      const BwdPlan plan = plan_backward(fixed_length(2, seqlen, seqlen, 8, 2, d));
      EXPECT_EQ(bwd_grid_ctas(plan, kSms, false), std::min(plan.num_tiles, kSms)) << d << " " << seqlen;
    }
  }
  const BwdPlan one_tile = plan_backward(fixed_length(1, 10, 10, 1, 1, 128));
  EXPECT_EQ(one_tile.num_tiles, 1);
  EXPECT_EQ(bwd_grid_ctas(one_tile, kSms, false), 1);
  const BwdPlan many = plan_backward(fixed_length(4, 8192, 8192, 16, 16, 64));
  EXPECT_EQ(bwd_grid_ctas(many, 1, false), 1);  // a device of one SM
}

// Every problem gets the persistent grid, whatever its tiles' lengths (causal, window, varlen, fixed). A
// small device, so that every case has more tiles than SMs (at 512 tokens: 4 key blocks x 3 or 4
// sequences x 2 kv heads) and a grid of one CTA per tile would differ.
TEST(BwdPlanner, EveryProblemGetsThePersistentGrid) {
  constexpr int kSms = 16;
  for (int seqlen : {512, 1024, 1025, 16384}) {
    flash4_bwd_params causal = fixed_length(4, seqlen, seqlen, 8, 2, 128);
    causal.causal = 1;
    flash4_bwd_params window = fixed_length(4, seqlen, seqlen, 8, 2, 128);
    window.window_left = 256;
    flash4_bwd_params varlen = fixed_length(3, 0, 0, 8, 2, 128);
    varlen.cu_seqlens_q = reinterpret_cast<const int*>(16);  // only tested against null by the planner
    varlen.cu_seqlens_k = varlen.cu_seqlens_q;
    varlen.max_seqlen_q = seqlen;
    varlen.max_seqlen_k = seqlen;
    varlen.total_q = 2 * seqlen;
    varlen.total_k = 2 * seqlen;
    for (const flash4_bwd_params& p : {causal, window, varlen, fixed_length(4, seqlen, seqlen, 8, 2, 128)}) {
      const BwdPlan plan = plan_backward(p);
      ASSERT_GT(plan.num_tiles, kSms) << seqlen;
      EXPECT_EQ(bwd_grid_ctas(plan, kSms, false), kSms) << seqlen;
    }
  }
}

// One tile per key block, partial blocks included: 3 key blocks for 3 * block_n - 5 keys.
TEST(BwdPlanner, OneTilePerKeyBlock) {
  for (int d : {64, 96, 128, 192, 256}) {
    const BwdTileConfig tile = bwd_tile_config(d);
    const BwdPlan plan = plan_backward(fixed_length(2, 100, 3 * tile.block_n - 5, 4, 4, d));
    EXPECT_EQ(plan.n_blocks_max, 3) << d;
    EXPECT_EQ(plan.num_tiles, 3 * 2 * 4) << d;
    EXPECT_LE(tile.smem_bytes(), kSmemBytesPerBlockMax) << d;
  }
}

TEST(BwdPlanner, VarlenGivesEverySequenceAFullPaddingBlock) {
  for (int d : {64, 128}) {  // block_m = 128 and 64
    flash4_bwd_params p = fixed_length(4, 0, 0, 4, 4, d);
    const int cu[] = {0, 17, 17, 300, 301};  // host copy only: the planner never reads cu_seqlens
    p.cu_seqlens_q = cu;
    p.cu_seqlens_k = cu;
    p.max_seqlen_q = 283;
    p.max_seqlen_k = 283;
    p.total_q = 301;
    p.total_k = 301;
    const BwdPlan plan = plan_backward(p);
    const int block_m = plan.tile.block_m;
    EXPECT_EQ(block_m, d == 64 ? 128 : 64);
    EXPECT_EQ(plan.m_blocks_max, (283 + block_m - 1) / block_m) << d;
    EXPECT_EQ(plan.n_blocks_max, 3) << d;  // ceil(283 / 128)
    EXPECT_EQ(plan.rows_per_head, 304LL + 4 * (block_m + 4)) << d;  // 301 aligned to 4, then a block and 4 per sequence
    // Each sequence starts 16-byte aligned, and its last query block ends before the next sequence.
    const BwdWorkspaceRows rows{block_m, 0, true};
    EXPECT_EQ(plan.rows_per_head % 4, 0) << d;
    for (int b = 0; b < 4; ++b) {
      const int length = cu[b + 1] - cu[b];
      const long long last_block_end = rows.first_row(b, cu) + (length + block_m - 1) / block_m * block_m;
      const long long next_start = b + 1 < 4 ? rows.first_row(b + 1, cu) : plan.rows_per_head;
      EXPECT_LE(last_block_end, next_start) << "D " << d << " sequence " << b;
      EXPECT_EQ(rows.first_row(b, cu) % 4, 0) << "D " << d << " sequence " << b;
    }
    expect_layout_sound(plan, p);
  }
}

// Issue 28, finding 1: max_seqlen_q near 2^31 overflowed the planner's int arithmetic, and the workspace it
// sized (1 KiB) was far smaller than the dQ accumulator alone (132 MB). Counted in 64 bits, every array fits.
TEST(BwdPlanner, MaxSeqlenNear2To31StillSizesEveryArray) {
  flash4_bwd_params p = fixed_length(1, 0, 0, 1, 1, 128);
  p.cu_seqlens_q = p.cu_seqlens_k = reinterpret_cast<const int*>(16);  // only tested against null
  p.total_q = 258041;
  p.max_seqlen_q = 2147483647;
  p.total_k = 1000;
  p.max_seqlen_k = 1000;
  const BwdPlan plan = plan_backward(p);
  EXPECT_EQ(plan.m_blocks_max, 33554432);  // ceil((2^31 - 1) / 64)
  EXPECT_GE(plan.workspace.dq_accum_bytes, std::size_t{258041} * 128 * sizeof(float));
  EXPECT_GE(plan.workspace.total, plan.workspace.dq_accum_bytes + plan.workspace.semaphore_bytes);
  expect_layout_sound(plan, p);
}

// A count past the int the kernels take (which validation's size limits exclude) is an error, not a wrapped
// number: 2^20 sequences x 64 heads x 2^13 key blocks of 128 = 2^39 tiles.
TEST(BwdPlanner, CountsPastTheKernelsIntThrow) {
  EXPECT_THROW(plan_backward(fixed_length(1 << 20, 1 << 20, 1 << 20, 64, 64, 64)), std::length_error);
  EXPECT_THROW(plan_backward(fixed_length(1, 2147483647, 128, 1, 1, 128)), std::length_error);
}

// Deterministic mode splits the dQ accumulator into kBwdDeterministicDqCopies copies, fewer when there are
// fewer key blocks; otherwise one. The workspace grows with the copies.
TEST(BwdPlanner, DeterministicModeSplitsTheDqAccumulator) {
  for (int d : {64, 128, 256}) {
    const BwdTileConfig tile = bwd_tile_config(d);
    for (int key_blocks : {1, 2, 3, 4, 9}) {
      flash4_bwd_params p = fixed_length(2, 300, key_blocks * tile.block_n, 4, 2, d);
      const BwdPlan loose = plan_backward(p);
      EXPECT_EQ(loose.dq_copies, 1) << d;
      p.deterministic = 1;
      const BwdPlan plan = plan_backward(p);
      EXPECT_EQ(plan.dq_copies, key_blocks < kBwdDeterministicDqCopies ? key_blocks : kBwdDeterministicDqCopies)
          << "D " << d << ", " << key_blocks << " key blocks";
      EXPECT_EQ(plan.workspace.dq_accum_bytes, plan.dq_copies * loose.workspace.dq_accum_bytes) << d;
      expect_layout_sound(plan, p);
    }
  }
}

// causal = 1 is a right edge of 0 whatever window_right holds (FlashAttention's meaning; the C ABI accepts any
// window_right >= -1 with it).
TEST(BwdPlanner, CausalFoldsIntoTheRightWindowEdge) {
  for (int window_right : {-1, 0, 16}) {
    flash4_bwd_params p = fixed_length(1, 128, 128, 1, 1, 64);
    p.causal = 1;
    p.window_left = 32;
    p.window_right = window_right;
    const BwdPlan plan = plan_backward(p);
    EXPECT_EQ(plan.window_left, 32);
    EXPECT_EQ(plan.window_right, 0) << window_right;
  }
}

TEST(BwdPlanner, EveryForwardHeadDimHasABackward) {
  for (int d : {64, 96, 128, 192, 256}) EXPECT_TRUE(bwd_supports_head_dim(d)) << d;
  for (int d : {0, 32, 80, 112, 160, 512}) EXPECT_FALSE(bwd_supports_head_dim(d)) << d;
}

// Up to 128 the warpgroups split the keys (128 per CTA); at 192 the key columns (96 per CTA, 48 per
// warpgroup); at 256 the roles (64 keys per CTA, so twice the CTAs); D = 96 pads its tiles to two whole
// 64-column boxes. At D = 64 a step is 128 query rows and the warpgroups split dQ by rows (64 each, every
// column); at 96 and 128, 64 rows split by columns.
TEST(BwdPlanner, WideHeadDimsSplitByKeyColumnsOrRoles) {
  for (int d : {64, 96, 128}) {
    const BwdTileConfig tile = bwd_tile_config(d);
    EXPECT_EQ(tile.split, BwdSplit::kKeys) << d;
    EXPECT_EQ(tile.block_n, 128) << d;
    EXPECT_EQ(tile.block_m, d == 64 ? 128 : 64) << d;
    EXPECT_EQ(tile.dq_row_slices(), tile.block_m / 64) << d;
    EXPECT_EQ(tile.dq_chunks(), d == 64 ? 1 : 2) << d;
    // The two warpgroups' dQ slices tile the block_m x tile_cols product exactly once.
    EXPECT_EQ(tile.dq_row0(0) == tile.dq_row0(1), tile.dq_col0(0) != tile.dq_col0(1)) << d;
    EXPECT_EQ(64 * tile.dq_cols_per_warpgroup() * tile.consumer_warpgroups, tile.block_m * tile.tile_cols()) << d;
    EXPECT_GT(tile.dq_buffer_bytes(), 0) << d;
    EXPECT_EQ(tile.probs_bytes(), 0) << d;
    EXPECT_LE(tile.smem_bytes(), kSmemBytesPerBlockMax) << d;
  }
  EXPECT_EQ(bwd_tile_config(96).tile_cols(), 128);
  EXPECT_EQ(bwd_tile_config(96).q_bytes(), 64 * 128 * 2);
  {
    // 192: 48 keys per warpgroup (the wgmma N of S, dP, dK^T, dV^T), the key rows of a warpgroup starting on
    // an 8-row swizzle atom of K, V, P^T and dS^T; dQ in three box-wide chunks; P^T (16-bit) laid out as
    // dS^T, two dS^T buffers following the two stages; no dQ staging.
    const BwdTileConfig tile = bwd_tile_config(192);
    EXPECT_EQ(tile.split, BwdSplit::kKeyColumns);
    EXPECT_EQ(tile.block_n, 96);
    EXPECT_EQ(tile.block_m, 64);
    EXPECT_EQ(tile.keys_per_warpgroup(), 48);
    EXPECT_EQ(tile.keys_per_warpgroup() % 8, 0);
    EXPECT_EQ(tile.tile_cols(), 192);
    EXPECT_EQ(tile.dq_cols_per_warpgroup(), 64);
    EXPECT_EQ(tile.dq_chunks(), 3);
    EXPECT_EQ(tile.dq_buffer_bytes(), 0);
    EXPECT_EQ(tile.ds_buffers(), tile.stages);
    EXPECT_EQ(tile.probs_bytes(), tile.ds_bytes());
    EXPECT_EQ(tile.ds_bytes(), 96 * 64 * 2);
    EXPECT_EQ(tile.probs_offset() % 1024, 0);
    EXPECT_EQ(tile.ds_offset(1) % 1024, 0);
    EXPECT_GE(tile.probs_offset(), tile.ds_offset(1) + tile.ds_bytes());
    EXPECT_GE(tile.barrier_offset(), tile.probs_offset() + tile.probs_bytes());
    EXPECT_LE(tile.smem_bytes(), kSmemBytesPerBlockMax);
    // A fp32 dQ staging buffer would not fit beside the rest.
    EXPECT_GT(tile.smem_bytes() + tile.block_m * 192 * 4, kSmemBytesPerBlockMax);
  }
  {
    const BwdTileConfig tile = bwd_tile_config(256);
    EXPECT_EQ(tile.split, BwdSplit::kRoles);
    EXPECT_EQ(tile.block_n, 64);
    EXPECT_EQ(tile.tile_cols(), 256);
    EXPECT_EQ(tile.dq_chunks(), 4);
    EXPECT_EQ(tile.dq_buffer_bytes(), 0);
    EXPECT_EQ(tile.probs_bytes(), 64 * 64 * 4);
    EXPECT_LE(tile.smem_bytes(), kSmemBytesPerBlockMax);
    EXPECT_GE(tile.probs_offset(), tile.ds_offset(0) + tile.ds_bytes());
    EXPECT_GE(tile.barrier_offset(), tile.probs_offset() + tile.probs_bytes());
  }
  const BwdPlan plan = plan_backward(fixed_length(2, 100, 1000, 4, 4, 256));
  EXPECT_EQ(plan.n_blocks_max, 16);  // ceil(1000 / 64)
  EXPECT_EQ(plan.num_tiles, 16 * 2 * 4);
  const BwdPlan plan192 = plan_backward(fixed_length(2, 100, 1000, 4, 4, 192));
  EXPECT_EQ(plan192.n_blocks_max, 11);  // ceil(1000 / 96)
  EXPECT_EQ(plan192.num_tiles, 11 * 2 * 4);
}

// The dQ staging order is also the accumulator's order within each query block (the writer adds a staged
// partial with one contiguous reduce-add; the roles consumers and the postprocess index the accumulator
// with it): unswizzled boxes of 32-byte rows, box b holding columns [8b, 8b + 8) of every row; every
// element of the block_m x head_dim block exactly once, so a block's rows fill exactly its region;
// linear in rows and in whole boxes, as the stores and adds use it (a thread's base, its fragment row
// and column within a box, plus a constant per 8-row x 8-column fragment block); and, split by keys, a
// warp's float2 stores of one fragment column block (8 rows x 4 lanes) take the minimum two wavefronts
// (each bank twice).
TEST(BwdPlanner, DqStagingIsTheAccumulatorBlockOrder) {
  for (int d : {64, 96, 128, 192, 256}) {
    const BwdTileConfig tile = bwd_tile_config(d);
    ASSERT_EQ(tile.dq_box_cols() * 4, kDqBoxBytes) << d;
    if (tile.split == BwdSplit::kKeys) {
      EXPECT_EQ(tile.dq_buffer_bytes(), tile.block_m * d * 4) << d;
    }
    std::vector<int> seen(tile.block_m * d, 0);
    for (int row = 0; row < tile.block_m; ++row) {
      for (int col = 0; col < d; ++col) {
        const int index = tile.dq_staging_index(row, col);
        ASSERT_GE(index, 0);
        ASSERT_LT(index, int(seen.size()));
        ++seen[index];
        EXPECT_EQ(index, (col / 8) * tile.block_m * 8 + row * 8 + col % 8) << d;
      }
    }
    for (int row = 0; row < 8; ++row) {
      for (int col = 0; col < 8; ++col) {
        for (int row8 = 0; row8 < tile.block_m; row8 += 8) {
          for (int col8 = 0; col8 < d; col8 += 8) {
            ASSERT_EQ(tile.dq_staging_index(row + row8, col + col8),
                      tile.dq_staging_index(row, col) + tile.dq_staging_index(row8, col8))
                << d;
          }
        }
      }
    }
    for (int count : seen) ASSERT_EQ(count, 1) << d;
    if (tile.split != BwdSplit::kKeys) continue;
    for (int k = 0; k < d / 8; ++k) {
      std::vector<int> bank_hits(32, 0);
      for (int lane = 0; lane < 32; ++lane) {
        const int index = tile.dq_staging_index(lane / 4, 8 * k) + 2 * (lane % 4);
        ++bank_hits[index % 32];
        ++bank_hits[(index + 1) % 32];
      }
      for (int hits : bank_hits) EXPECT_EQ(hits, 2) << d << " k=" << k;
    }
  }
}

}  // namespace
}  // namespace flash4::host
