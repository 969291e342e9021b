// The backward split by key columns stores its S-shaped accumulators (rows: queries or head-dim rows,
// columns: the warpgroup's keys) transposed into key rows with stmatrix.x4.trans, where wgmma reads them
// K-major with the 128-byte swizzle (P^T, dS^T) and the dK / dV stores read them back. Checked here: the
// address each lane gives (transposed_store_offset) puts every accumulator element where that layout has
// it, modelling the instruction from the PTX description, and the four warps' stores fill the
// warpgroup's rows exactly once.
#include <gtest/gtest.h>

#include <vector>

#include "kernels/common/transposed_rows.hpp"
#include "launch/bwd_tile_config.hpp"

namespace flash4 {
namespace {

constexpr int kRowBytes = 128;  // one swizzle row: 64 16-bit elements of the accumulator's rows

// The 128-byte-swizzled K-major layout: element k of key row `row` (k < 64).
int swizzled_offset(int row, int k) { return row * kRowBytes + ((k / 8) ^ (row % 8)) * 16 + (k % 8) * 2; }

TEST(TransposedRows, StmatrixTransPutsEveryElementWhereWgmmaReadsIt) {
  const BwdTileConfig tile = bwd_tile_config(192);
  ASSERT_EQ(tile.split, BwdSplit::kKeyColumns);
  ASSERT_EQ(tile.swizzle_bytes, kRowBytes);
  const int keys = tile.keys_per_warpgroup();
  ASSERT_EQ(keys % 16, 0);
  for (int warpgroup = 0; warpgroup < tile.consumer_warpgroups; ++warpgroup) {
    const int key_row0 = warpgroup * keys;
    std::vector<int> written(tile.block_n * kRowBytes / 2, 0);  // 16-bit elements of the whole buffer
    for (int warp = 0; warp < 4; ++warp) {
      for (int pair = 0; pair < keys / 16; ++pair) {
        for (int lane = 0; lane < 32; ++lane) {
          // Lane l's address takes column l % 8 of matrix l / 8: its 8 rows, 16-bit each, consecutive.
          const int matrix = lane / 8;
          const int address = transposed_store_offset(key_row0, warp, lane, kRowBytes) + pair * 16 * kRowBytes;
          for (int r = 0; r < 8; ++r) {
            // Matrix i of a pair: accumulator rows 16 warp + 8 (i % 2) + 0..7, keys 16 pair + 8 (i / 2) + 0..7.
            const int accumulator_row = 16 * warp + 8 * (matrix % 2) + r;
            const int key = 16 * pair + 8 * (matrix / 2) + lane % 8;
            const int at = address + 2 * r;
            ASSERT_EQ(at, swizzled_offset(key_row0 + key, accumulator_row))
                << "warpgroup " << warpgroup << " warp " << warp << " lane " << lane << " pair " << pair;
            ++written[at / 2];
          }
        }
      }
    }
    // Exactly the warpgroup's rows, every element once.
    for (int row = 0; row < tile.block_n; ++row) {
      const bool own = row >= key_row0 && row < key_row0 + keys;
      for (int e = 0; e < kRowBytes / 2; ++e) ASSERT_EQ(written[row * kRowBytes / 2 + e], own ? 1 : 0) << row;
    }
  }
}

// The dK / dV stores read back, per warp, the units it wrote (2 warp and 2 warp + 1 of every key row):
// no other warp writes them, so the warps need no barrier between their stores and reads.
TEST(TransposedRows, EachWarpWritesOnlyItsOwnUnits) {
  for (int warp = 0; warp < 4; ++warp) {
    for (int pair = 0; pair < 3; ++pair) {
      for (int lane = 0; lane < 32; ++lane) {
        const int offset = transposed_store_offset(48, warp, lane, kRowBytes) + pair * 16 * kRowBytes;
        const int row = offset / kRowBytes;
        const int unit = (offset % kRowBytes) / 16 ^ (row % 8);
        EXPECT_EQ(unit / 2, warp) << lane;
        EXPECT_EQ(offset % 16, 0);
      }
    }
  }
}

}  // namespace
}  // namespace flash4
