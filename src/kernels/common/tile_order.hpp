// The order in which the persistent forward kernel visits its (batch, head, m-block) tiles. Shared by the
// host (scheduler unit tests, makespan simulation) and the device (each CTA walks linear indices
// blockIdx.x, blockIdx.x + gridDim.x, ... and maps them through tile_at).
#pragma once

#include "kernels/common/host_device.hpp"

namespace flash4 {

struct Tile {
  int batch;
  int head;
  int m_block;
};

struct TileOrder {
  int num_batches = 1;
  int num_heads = 1;
  int num_m_blocks = 1;
  // Heads visited together (all their m-blocks) so that their K/V stay resident in L2; divides nothing,
  // the last group may be short. >= 1.
  int heads_per_group = 1;
  // Causal (bottom-right): m-block i costs about i+1 key blocks, so visit the last m-blocks first.
  bool longest_first = false;

  FLASH4_HD int num_tiles() const { return num_batches * num_heads * num_m_blocks; }
};

// Linear index -> tile. Heads (of all batches) are taken in groups of heads_per_group; inside a group
// the m-block index is the slow coordinate, so a CTA wave sweeps one m-block over the group's heads
// (same cost per tile) before moving on: with longest_first the wave goes from the most expensive
// m-block down, which is the longest-processing-time-first list schedule.
FLASH4_HD Tile tile_at(const TileOrder& order, int linear) {
  const int heads_total = order.num_batches * order.num_heads;
  const int group_tiles = order.heads_per_group * order.num_m_blocks;
  const int group = linear / group_tiles;
  const int in_group = linear - group * group_tiles;
  const int group_first_head = group * order.heads_per_group;
  const int remaining = heads_total - group_first_head;
  const int group_size = remaining < order.heads_per_group ? remaining : order.heads_per_group;
  const int m_step = in_group / group_size;
  const int bh = group_first_head + (in_group - m_step * group_size);
  const int m_block = order.longest_first ? order.num_m_blocks - 1 - m_step : m_step;
  return Tile{bh / order.num_heads, bh % order.num_heads, m_block};
}

}  // namespace flash4
