// The varlen forward's compact tile space. The persistent forward walks tiles (sequence, head, query block);
// with sequences of different lengths, a grid of batch x heads x the longest sequence's blocks is mostly
// tiles past their sequence's end, which the producer would claim past one atomic at a time. Instead a
// one-CTA prepare kernel (kernels/util/varlen_tiles.cu) lists only the tiles that have rows, in the
// forward's workspace, and the producer maps each claimed index straight to one of them.
//
// The order: sequences by query-block count, most first (the longest-processing-time-first list schedule
// at sequence level; sequences of equal count in any order, since no result depends on the order); within
// a sequence, its heads in groups whose K/V fit the L2 share (tile_order.hpp's groups, sized by this
// sequence's keys, so a group never mixes sequences), and within a group the m-block as the slow
// coordinate, last first when the order is longest-first. The tiles are laid out in "units", one per
// (sequence, query block) in that sequence order: sequence s owns units [first, first + blocks) and tiles
// [heads * first, heads * (first + blocks)). A table with one entry per unit then takes a claimed index to
// its sequence with one load: index / heads is its unit.
//
// Host and device code: the prepare kernel and the producer use these functions, and tests/cpu runs them
// against the fixed-length order's tiles.
#pragma once

#include "kernels/common/host_device.hpp"
#include "kernels/common/tile_order.hpp"

namespace flash4 {

// One unit's entry: its sequence, as the producer needs it to place a tile. 16 bytes, one vector load.
struct alignas(16) VarlenUnit {
  int batch;            // the sequence's index in cu_seqlens
  int first_unit;       // the sequence's first unit
  int blocks;           // its query blocks: ceil(rows used / block_m)
  int heads_per_group;  // its heads visited together, in [1, heads]
};

// What the prepare kernel reads and writes. The pointers into the workspace are laid out by the host
// (host/planner.hpp); bins and units are sized from the params alone, so every count below is clamped to
// them: cu_seqlens and seqused live on the device, and values that break their documented rules give a
// wrong schedule, never a write outside the workspace.
struct VarlenTileSpace {
  const int* cu_seqlens_q;
  const int* cu_seqlens_k;
  const int* seqused_q;  // null: every row of a sequence's span is used
  const int* seqused_k;
  int batch;
  int heads;
  int block_m;
  int max_rows_q;   // max_seqlen_q: no sequence uses more rows
  int max_rows_k;
  int l2_kv_rows;   // key rows whose K and V (one head) fit the L2 share a head group may fill; 0: unknown
  int* tile_counter;     // the forward's claim counter, zeroed by the prepare kernel
  int* num_tiles;        // written: the tiles with rows (heads x the units listed)
  int* bins;             // num_bins ints: per block count, first its sequences, then the first unit of its run
  int num_bins;          // > every sequence's block count
  VarlenUnit* units;
  int unit_capacity;
};

// Rows a sequence uses, clamped to [0, max_rows]: the span given by cu_seqlens, or seqused where given.
FLASH4_HD int varlen_used_rows(const int* cu_seqlens, const int* seqused, int batch, int max_rows) {
  int rows = cu_seqlens[batch + 1] - cu_seqlens[batch];
  if (seqused != nullptr) rows = seqused[batch] < rows ? seqused[batch] : rows;
  return rows < 0 ? 0 : rows > max_rows ? max_rows : rows;
}

// The sequence's query blocks; < space.num_bins.
FLASH4_HD int varlen_query_blocks(const VarlenTileSpace& space, int batch) {
  const int rows = varlen_used_rows(space.cu_seqlens_q, space.seqused_q, batch, space.max_rows_q);
  const int blocks = (rows + space.block_m - 1) / space.block_m;
  return blocks < space.num_bins ? blocks : space.num_bins - 1;
}

// The sequence's heads per group: as many as the L2 share holds K/V of (scheduler.hpp's make_tile_order,
// with this sequence's keys), at least one, at most all.
FLASH4_HD int varlen_heads_per_group(const VarlenTileSpace& space, int batch) {
  const int rows = varlen_used_rows(space.cu_seqlens_k, space.seqused_k, batch, space.max_rows_k);
  const int fitting = space.l2_kv_rows / (rows > 0 ? rows : 1);
  return fitting < 1 ? 1 : fitting > space.heads ? space.heads : fitting;
}

// *counter += amount, returning the old value: an atomic on the device, where the prepare kernel's threads
// add concurrently (in an order that varies from run to run).
FLASH4_HD int fetch_add(int* counter, int amount) {
#if defined(__CUDA_ARCH__)
  return atomicAdd(counter, amount);
#else
  const int old = *counter;
  *counter += amount;
  return old;
#endif
}

// The prepare kernel's phases: (1) zero the bins, (2) count the sequences of each block count in bin n, (3)
// turn the counts into each bin's first unit, most blocks first, (4) each sequence takes its units from its
// bin, which now serves as a cursor, and its entries are written.

// Phase 2 for one sequence.
FLASH4_HD void count_varlen_sequence(const VarlenTileSpace& space, int batch) {
  fetch_add(&space.bins[varlen_query_blocks(space, batch)], 1);
}

// Phase 3 splits the bins among `workers` threads in descending order: worker w takes the run of up to
// `count` bins from `top` down (bin 0, the empty sequences', gets no units), so that a prefix sum over the
// workers of their runs' units joins the runs.
struct VarlenBinRun {
  int top;
  int count;
};

FLASH4_HD VarlenBinRun varlen_bin_run(int num_bins, int worker, int workers) {
  const int per_worker = (num_bins + workers - 1) / workers;
  return VarlenBinRun{num_bins - 1 - worker * per_worker, per_worker};
}

// The units of the sequences counted in the run's bins.
FLASH4_HD int varlen_run_units(const VarlenTileSpace& space, VarlenBinRun run) {
  int units = 0;
  for (int k = 0; k < run.count && run.top - k >= 1; ++k) units += (run.top - k) * space.bins[run.top - k];
  return units;
}

// Replaces the run's counts by each bin's first unit, given the units of all the bins above the run.
FLASH4_HD void place_varlen_run(const VarlenTileSpace& space, VarlenBinRun run, int units_above) {
  for (int k = 0; k < run.count && run.top - k >= 1; ++k) {
    const int blocks = run.top - k;
    const int sequences = space.bins[blocks];
    space.bins[blocks] = units_above;
    units_above += blocks * sequences;
  }
}

// The tiles listed for `units` units in all: those the table holds.
FLASH4_HD int varlen_listed_tiles(const VarlenTileSpace& space, int units) {
  return space.heads * (units < space.unit_capacity ? units : space.unit_capacity);
}

// Phase 4: the sequence's entry, its run of units taken from its bin's cursor (blocks 0: no units).
FLASH4_HD VarlenUnit take_varlen_units(const VarlenTileSpace& space, int batch) {
  VarlenUnit unit{batch, 0, varlen_query_blocks(space, batch), 1};
  if (unit.blocks > 0) {
    unit.first_unit = fetch_add(&space.bins[unit.blocks], unit.blocks);
    unit.heads_per_group = varlen_heads_per_group(space, batch);
  }
  return unit;
}

// Writes the entries of the sequence's units numbered begin, begin + step, ... (the prepare kernel's lanes
// share a sequence this way); none at or past the table's capacity.
FLASH4_HD void fill_varlen_units(const VarlenTileSpace& space, const VarlenUnit& unit, int begin, int step) {
  for (int k = begin; k < unit.blocks && unit.first_unit + k < space.unit_capacity; k += step) {
    space.units[unit.first_unit + k] = unit;
  }
}

// Claimed index -> tile, for linear < heads x the units listed.
FLASH4_HD Tile varlen_tile_at(const VarlenUnit* units, int heads, bool longest_first, int linear) {
  const VarlenUnit unit = units[linear / heads];
  const TileOrder sequence{1, heads, unit.blocks, unit.heads_per_group, longest_first};
  Tile tile = tile_at(sequence, linear - unit.first_unit * heads);
  tile.batch = unit.batch;
  return tile;
}

}  // namespace flash4
