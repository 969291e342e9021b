#include "host/scheduler.hpp"

#include <algorithm>
#include <functional>
#include <queue>
#include <stdexcept>
#include <vector>

namespace flash4::host {
namespace {

void require_workers(int workers) {
  if (workers < 1) throw std::invalid_argument("makespan simulation: workers must be >= 1");
}

}  // namespace

TileOrder make_tile_order(int batch, int heads, int num_m_blocks, bool causal, std::size_t kv_bytes_per_head,
                          std::size_t l2_bytes) {
  TileOrder order;
  order.num_batches = batch;
  order.num_heads = heads;
  order.num_m_blocks = num_m_blocks;
  // Every m-block of a head re-reads all of that head's K and V. Visiting a group of heads together
  // keeps the group's K/V in L2 across those re-reads, provided it fits with room to spare: the other
  // half of L2 takes the streaming Q loads and O stores, the next group's first K/V loads, and the
  // imperfection of the replacement policy. At least one head per group, at most all of them.
  const std::size_t total_heads = static_cast<std::size_t>(batch) * static_cast<std::size_t>(heads);
  const std::size_t budget = l2_bytes / kL2KvShareDivisor;
  const std::size_t fitting = kv_bytes_per_head == 0 ? total_heads : budget / kv_bytes_per_head;
  order.heads_per_group = static_cast<int>(std::clamp<std::size_t>(fitting, 1, total_heads));
  // Causal m-block i costs about i + 1 key blocks: longest first, so the cheap tiles fill the tail.
  order.longest_first = causal;
  return order;
}

double simulate_makespan(const TileOrder& order, int workers, const TileCost& cost) {
  require_workers(workers);
  std::vector<double> busy(static_cast<std::size_t>(workers), 0.0);
  for (int linear = 0; linear < order.num_tiles(); ++linear) {
    busy[static_cast<std::size_t>(linear % workers)] += cost(tile_at(order, linear));
  }
  return *std::max_element(busy.begin(), busy.end());
}

double simulate_makespan_greedy(const TileOrder& order, int workers, const TileCost& cost) {
  require_workers(workers);
  // Min-heap of the times at which workers become free.
  std::priority_queue<double, std::vector<double>, std::greater<>> free_at;
  for (int w = 0; w < workers; ++w) free_at.push(0.0);
  double makespan = 0.0;
  for (int linear = 0; linear < order.num_tiles(); ++linear) {
    const double finish = free_at.top() + cost(tile_at(order, linear));
    free_at.pop();
    free_at.push(finish);
    makespan = std::max(makespan, finish);
  }
  return makespan;
}

}  // namespace flash4::host
