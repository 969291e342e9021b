// Host side of the persistent forward scheduler: picks the tile order the kernel walks (L2-aware head
// groups, longest-first m-blocks for causal) and simulates a persistent grid walking it, so that the
// order's quality is measured without a GPU. Host-only: no CUDA headers.
#pragma once

#include <cstddef>
#include <functional>

#include "kernels/common/tile_order.hpp"

namespace flash4::host {

// Share of the L2 that one head group's K and V may fill (see make_tile_order).
inline constexpr std::size_t kL2KvShareDivisor = 2;

// The order for batch x heads (query) heads of num_m_blocks query blocks each (all >= 1).
// kv_bytes_per_head: K plus V of one head, the data every m-block of that head re-reads; l2_bytes: the
// device's L2 size (0 when unknown gives one head per group).
TileOrder make_tile_order(int batch, int heads, int num_m_blocks, bool causal, std::size_t kv_bytes_per_head,
                          std::size_t l2_bytes);

// Cost of one tile in arbitrary time units.
using TileCost = std::function<double(const Tile&)>;

// Makespan of the kernel's static walk: worker w (a persistent CTA) takes linear indices w, w + workers,
// w + 2 * workers, ... and runs them back to back; the result is the largest worker total.
double simulate_makespan(const TileOrder& order, int workers, const TileCost& cost);

// Makespan of a dynamic walk (an atomic tile counter): each tile, in linear order, goes to the worker
// that becomes free first. The list-scheduling bound that longest-first improves applies to this one.
double simulate_makespan_greedy(const TileOrder& order, int workers, const TileCost& cost);

}  // namespace flash4::host
