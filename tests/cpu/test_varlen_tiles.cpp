// The varlen forward's compact tile space (kernels/common/varlen_tiles.hpp): the prepare kernel's phases,
// run here on the host with the very functions the kernel calls (its atomics' order shuffled), must list
// exactly the tiles with rows of the fixed-length order (tile_order.hpp), each once, in the documented
// order, within the workspace the host sizes from the params alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "host/planner.hpp"
#include "host/scheduler.hpp"
#include "kernels/common/sequence_rows.hpp"
#include "kernels/common/tile_order.hpp"
#include "kernels/common/varlen_tiles.hpp"
#include "launch/fwd_tile_config.hpp"

namespace flash4 {
namespace {

constexpr int kLanes = 32;  // the prepare kernel's warp
constexpr int kPoison = -7;

// A ragged batch as the device would hold it.
struct Batch {
  std::vector<int> cu_q, cu_k;
  std::vector<int> used_q, used_k;  // empty: no seqused
  int max_q = 1, max_k = 1;         // canonical: no larger than the totals, at least 1
  int heads = 1;
  int block_m = 128;
  int l2_kv_rows = 0;
  bool longest_first = false;

  int batch() const { return static_cast<int>(cu_q.size()) - 1; }
  int total_q() const { return cu_q.back(); }
};

// Lengths: many empty and short sequences, some near a block boundary, and one long one.
Batch random_batch(std::mt19937& rng) {
  Batch b;
  const int batch = std::uniform_int_distribution<int>(1, 40)(rng);
  const int long_one = std::uniform_int_distribution<int>(0, batch - 1)(rng);
  b.cu_q = {0};
  b.cu_k = {0};
  for (int s = 0; s < batch; ++s) {
    const int kind = std::uniform_int_distribution<int>(0, 3)(rng);
    int len = kind == 0 ? 0 : kind == 1 ? std::uniform_int_distribution<int>(1, 100)(rng)
                                         : std::uniform_int_distribution<int>(1, 4)(rng) * 64 +
                                               std::uniform_int_distribution<int>(-1, 1)(rng);
    if (s == long_one) len = std::uniform_int_distribution<int>(1000, 3000)(rng);
    const int len_k = std::max(0, len + std::uniform_int_distribution<int>(-50, 50)(rng));
    b.cu_q.push_back(b.cu_q.back() + len);
    b.cu_k.push_back(b.cu_k.back() + len_k);
    b.max_q = std::max(b.max_q, len);
    b.max_k = std::max(b.max_k, len_k);
  }
  if (std::uniform_int_distribution<int>(0, 2)(rng) == 0) {  // seqused, each in [0, span]
    for (int s = 0; s < batch; ++s) {
      b.used_q.push_back(std::uniform_int_distribution<int>(0, b.cu_q[s + 1] - b.cu_q[s])(rng));
      b.used_k.push_back(std::uniform_int_distribution<int>(0, b.cu_k[s + 1] - b.cu_k[s])(rng));
    }
  }
  const int heads_choices[] = {1, 3, 16};
  b.heads = heads_choices[std::uniform_int_distribution<int>(0, 2)(rng)];
  const int dims[] = {64, 96, 128, 192, 256};
  b.block_m = fwd_tile_config(dims[std::uniform_int_distribution<int>(0, 4)(rng)]).block_m();
  b.l2_kv_rows = std::uniform_int_distribution<int>(0, 3)(rng) * 1000;  // 0: one head per group
  b.longest_first = std::uniform_int_distribution<int>(0, 1)(rng) == 1;
  return b;
}

std::string describe(const Batch& b) {
  std::ostringstream text;
  text << "H " << b.heads << " block_m " << b.block_m << " l2 rows " << b.l2_kv_rows
       << (b.longest_first ? " longest-first" : "") << (b.used_q.empty() ? "" : " seqused") << " lengths";
  for (int s = 0; s < b.batch(); ++s) text << ' ' << b.cu_q[s + 1] - b.cu_q[s];
  return text.str();
}

// The workspace's lists, with guard entries past each that no phase may touch.
struct Lists {
  std::vector<int> header = {kPoison, kPoison};  // tile counter, tile count
  std::vector<int> bins;
  std::vector<VarlenUnit> units;
  int num_bins = 0;
  int unit_capacity = 0;
  static constexpr int kGuard = 8;

  Lists(int bins_count, int capacity) : num_bins(bins_count), unit_capacity(capacity) {
    bins.assign(static_cast<std::size_t>(bins_count + kGuard), kPoison);
    units.assign(static_cast<std::size_t>(capacity + kGuard), VarlenUnit{kPoison, kPoison, kPoison, kPoison});
  }
  bool guards_intact() const {
    const auto poisoned = [](const VarlenUnit& u) { return u.batch == kPoison && u.first_unit == kPoison; };
    return std::all_of(bins.begin() + num_bins, bins.end(), [](int v) { return v == kPoison; }) &&
           std::all_of(units.begin() + unit_capacity, units.end(), poisoned);
  }
};

VarlenTileSpace space_of(const Batch& b, Lists& lists) {
  VarlenTileSpace space{};
  space.cu_seqlens_q = b.cu_q.data();
  space.cu_seqlens_k = b.cu_k.data();
  space.seqused_q = b.used_q.empty() ? nullptr : b.used_q.data();
  space.seqused_k = b.used_k.empty() ? nullptr : b.used_k.data();
  space.batch = b.batch();
  space.heads = b.heads;
  space.block_m = b.block_m;
  space.max_rows_q = b.max_q;
  space.max_rows_k = b.max_k;
  space.l2_kv_rows = b.l2_kv_rows;
  space.tile_counter = &lists.header[0];
  space.num_tiles = &lists.header[1];
  space.bins = lists.bins.data();
  space.num_bins = lists.num_bins;
  space.units = lists.units.data();
  space.unit_capacity = lists.unit_capacity;
  return space;
}

// The prepare kernel's phases in order, `workers` threads' bin runs, its threads' atomics in a random order.
void prepare(const VarlenTileSpace& space, int workers, std::mt19937& rng) {
  std::fill(space.bins, space.bins + space.num_bins, 0);
  *space.tile_counter = 0;
  for (int batch = 0; batch < space.batch; ++batch) count_varlen_sequence(space, batch);
  std::vector<VarlenBinRun> runs;
  std::vector<int> run_units;
  for (int w = 0; w < workers; ++w) {
    runs.push_back(varlen_bin_run(space.num_bins, w, workers));
    run_units.push_back(varlen_run_units(space, runs.back()));
  }
  int units_above = 0;
  for (int w = 0; w < workers; ++w) {
    place_varlen_run(space, runs[static_cast<std::size_t>(w)], units_above);
    units_above += run_units[static_cast<std::size_t>(w)];
  }
  *space.num_tiles = varlen_listed_tiles(space, units_above);
  std::vector<int> order(static_cast<std::size_t>(space.batch));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  for (const int batch : order) {
    const VarlenUnit unit = take_varlen_units(space, batch);
    for (int lane = 0; lane < kLanes; ++lane) fill_varlen_units(space, unit, lane, kLanes);
  }
}

using TileKey = std::tuple<int, int, int>;  // batch, head, m-block

// The fixed-length order over batch x heads x the longest sequence's blocks, as the planner makes it, less
// the tiles past their sequence's used rows: what the forward computed before the compact list.
std::vector<TileKey> tiles_with_rows(const Batch& b) {
  const int m_blocks = (b.max_q + b.block_m - 1) / b.block_m;
  const TileOrder order = host::make_tile_order(b.batch(), b.heads, m_blocks, b.longest_first, 1000, 1 << 20);
  std::vector<TileKey> tiles;
  for (int linear = 0; linear < order.num_tiles(); ++linear) {
    const Tile t = tile_at(order, linear);
    const SequenceRows rows = sequence_rows(t.batch, 0, 0, b.cu_q.data(), b.cu_k.data(),
                                            b.used_q.empty() ? nullptr : b.used_q.data(),
                                            b.used_k.empty() ? nullptr : b.used_k.data());
    if (t.m_block * b.block_m < rows.seqlen_q) tiles.emplace_back(t.batch, t.head, t.m_block);
  }
  return tiles;
}

std::vector<TileKey> compact_walk(const VarlenTileSpace& space, bool longest_first) {
  std::vector<TileKey> tiles;
  for (int linear = 0; linear < *space.num_tiles; ++linear) {
    const Tile t = varlen_tile_at(space.units, space.heads, longest_first, linear);
    tiles.emplace_back(t.batch, t.head, t.m_block);
  }
  return tiles;
}

TEST(VarlenTiles, ListsExactlyTheTilesWithRowsEachOnce) {
  std::mt19937 rng(2026);
  for (int trial = 0; trial < 400; ++trial) {
    const Batch b = random_batch(rng);
    SCOPED_TRACE(describe(b));
    const int num_bins = (b.max_q + 63) / 64 + 1;
    Lists lists(num_bins, b.total_q() / 64 + b.batch());
    const VarlenTileSpace space = space_of(b, lists);
    prepare(space, std::uniform_int_distribution<int>(1, 9)(rng), rng);
    EXPECT_EQ(lists.header[0], 0) << "the forward's claim counter is zeroed";
    ASSERT_TRUE(lists.guards_intact());

    std::vector<TileKey> expected = tiles_with_rows(b);
    std::vector<TileKey> listed = compact_walk(space, b.longest_first);
    ASSERT_EQ(listed.size(), expected.size());
    std::sort(expected.begin(), expected.end());
    std::sort(listed.begin(), listed.end());
    ASSERT_EQ(listed, expected);  // both are sets: the fixed order visits each tile once
  }
}

// The documented order: sequences by block count, most first, each sequence's tiles together; within one,
// its heads in groups of heads_per_group (as many as the L2 share holds its K/V), each group's tiles with
// the m-block as the slow coordinate (last first when longest-first) and the heads in order.
TEST(VarlenTiles, OrderIsSequencesByBlocksThenHeadGroupsThenBlocks) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 400; ++trial) {
    const Batch b = random_batch(rng);
    SCOPED_TRACE(describe(b));
    Lists lists((b.max_q + 63) / 64 + 1, b.total_q() / 64 + b.batch());
    const VarlenTileSpace space = space_of(b, lists);
    prepare(space, 4, rng);
    const std::vector<TileKey> listed = compact_walk(space, b.longest_first);

    std::size_t at = 0;
    int previous_blocks = 1 << 30;
    std::vector<bool> seen(static_cast<std::size_t>(b.batch()), false);
    while (at < listed.size()) {
      const int batch = std::get<0>(listed[at]);
      ASSERT_FALSE(seen[static_cast<std::size_t>(batch)]) << "sequence " << batch << " comes back at " << at;
      seen[static_cast<std::size_t>(batch)] = true;
      const int used = b.used_q.empty() ? b.cu_q[batch + 1] - b.cu_q[batch] : b.used_q[batch];
      const int blocks = (used + b.block_m - 1) / b.block_m;
      ASSERT_LE(blocks, previous_blocks) << "sequence " << batch;
      previous_blocks = blocks;
      // Heads per group from this sequence's used keys, restated from the rule.
      const int keys = b.used_k.empty() ? b.cu_k[batch + 1] - b.cu_k[batch] : b.used_k[batch];
      const int group = std::clamp(b.l2_kv_rows / std::max(keys, 1), 1, b.heads);
      for (int first = 0; first < b.heads; first += group) {
        const int last = std::min(first + group, b.heads);
        for (int step = 0; step < blocks; ++step) {
          const int m_block = b.longest_first ? blocks - 1 - step : step;
          for (int head = first; head < last; ++head, ++at) {
            ASSERT_LT(at, listed.size());
            ASSERT_EQ(listed[at], TileKey(batch, head, m_block)) << "tile " << at;
          }
        }
      }
    }
  }
}

// The workspace the host sizes from the params alone holds every list, whatever the lengths within the
// documented bounds and whatever tile config serves the call.
TEST(VarlenTiles, WorkspaceHoldsTheListsOfAnyBatch) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 400; ++trial) {
    const Batch b = random_batch(rng);
    SCOPED_TRACE(describe(b));
    flash4_fwd_params p{};
    p.batch = b.batch();
    p.max_seqlen_q = b.max_q;
    p.total_q = b.total_q();
    const host::VarlenWorkspace w = host::varlen_workspace(p);
    int units = 0;
    for (int s = 0; s < b.batch(); ++s) units += (b.cu_q[s + 1] - b.cu_q[s] + b.block_m - 1) / b.block_m;
    EXPECT_LE(units, w.unit_capacity);
    EXPECT_GT(w.num_bins, (b.max_q + b.block_m - 1) / b.block_m);
    EXPECT_GE(w.num_tiles, sizeof(int)) << "after the tile counter";
    EXPECT_LE(w.num_tiles + sizeof(int), w.bins);
    EXPECT_EQ(w.bins % host::kFwdWorkspaceBytes, 0u);
    EXPECT_EQ(w.units % alignof(VarlenUnit), 0u);
    EXPECT_LE(w.bins + sizeof(int) * static_cast<std::size_t>(w.num_bins), w.units);
    EXPECT_EQ(w.bytes, w.units + sizeof(VarlenUnit) * static_cast<std::size_t>(w.unit_capacity));
  }
  // Every block_m of the tile table is a multiple of the rows the workspace counts per block.
  for (const int dim : {64, 96, 128, 192, 256}) EXPECT_EQ(fwd_tile_config(dim).block_m() % kRowsPerConsumerWarpgroup, 0);
}

// cu_seqlens and seqused live on the device: lengths that break their rules (not monotone, past
// max_seqlen, past the total the workspace was sized for) give some schedule, but every write stays
// inside the lists and every listed tile inside the grid's bounds.
TEST(VarlenTiles, LengthsBreakingTheRulesWriteNothingOutside) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 300; ++trial) {
    Batch b = random_batch(rng);
    for (int& offset : b.cu_q) offset = std::uniform_int_distribution<int>(-500, 5000)(rng);
    for (int& used : b.used_q) used = std::uniform_int_distribution<int>(-10, 5000)(rng);
    b.max_q = std::uniform_int_distribution<int>(1, 3000)(rng);
    SCOPED_TRACE(describe(b));
    const int num_bins = (b.max_q + 63) / 64 + 1;
    Lists lists(num_bins, std::uniform_int_distribution<int>(0, 40)(rng));
    const VarlenTileSpace space = space_of(b, lists);
    prepare(space, 3, rng);
    ASSERT_TRUE(lists.guards_intact());
    ASSERT_LE(lists.header[1], b.heads * lists.unit_capacity);
    for (const auto& [batch, head, m_block] : compact_walk(space, b.longest_first)) {
      ASSERT_TRUE(batch >= 0 && batch < b.batch() && head >= 0 && head < b.heads && m_block >= 0 &&
                  m_block < num_bins - 1);
    }
  }
}

}  // namespace
}  // namespace flash4
