#include "host/kvcache_plan.hpp"

#include <algorithm>
#include <cmath>

#include "host/kernel_choice.hpp"
#include "launch/decode_config.hpp"

namespace flash4::host {
namespace {

constexpr std::size_t kWorkspaceAlignment = 256;
constexpr double kBusyFraction = 0.8;      // an unsplit grid this full is left alone
constexpr double kFillTolerance = 0.85;    // the fewest splits within this of the best last-wave fill

std::size_t align_up(std::size_t bytes) { return (bytes + kWorkspaceAlignment - 1) / kWorkspaceAlignment * kWorkspaceAlignment; }

// How full the last wave of `ctas` CTAs is, `wave` CTAs per wave (1 when the waves are all full).
double last_wave_fill(std::int64_t ctas, std::int64_t wave) {
  const double waves = static_cast<double>(ctas) / static_cast<double>(wave);
  return waves / std::ceil(waves);
}

}  // namespace

std::int64_t kvcache_capacity(const flash4_kvcache_params& p) {
  return p.block_table != nullptr ? std::int64_t{p.max_pages_per_seq} * p.page_size : p.cache_seqlen;
}

bool kvcache_plan_needs_device(const flash4_kvcache_params& p) { return p.num_splits == 0; }

int choose_splits(std::int64_t ctas_per_split, int key_blocks, int sm_count, int ctas_per_sm) {
  const std::int64_t wave = std::int64_t{sm_count} * ctas_per_sm;
  if (sm_count <= 0 || static_cast<double>(ctas_per_split) >= kBusyFraction * static_cast<double>(wave)) return 1;
  const int most = static_cast<int>(
      std::min<std::int64_t>({decode::kMaxSplits, wave, key_blocks / kMinBlocksPerSplit}));
  if (most <= 1) return 1;
  double best = 0;
  for (int splits = 1; splits <= most; ++splits) best = std::max(best, last_wave_fill(ctas_per_split * splits, wave));
  for (int splits = 1; splits <= most; ++splits) {
    if (last_wave_fill(ctas_per_split * splits, wave) >= kFillTolerance * best) return splits;
  }
  return 1;
}

KvcachePlan plan_kvcache(const flash4_kvcache_params& p, int width, int sm_count) {
  KvcachePlan plan;
  plan.width = width;
  plan.group = p.heads_q / p.heads_kv;
  plan.rows = p.seqlen_q * plan.group;
  plan.row_tiles = decode::row_tiles_for(plan.rows);
  const int rows_per_cta = decode::kTileRows * plan.row_tiles;
  plan.row_blocks = (plan.rows + rows_per_cta - 1) / rows_per_cta;
  plan.capacity = static_cast<int>(kvcache_capacity(p));
  plan.key_blocks = (plan.capacity + decode::kBlockKeys - 1) / decode::kBlockKeys;
  const std::int64_t ctas_per_split = std::int64_t{plan.row_blocks} * p.heads_kv * p.batch;
  const int requested = p.num_splits == 0
                            ? choose_splits(ctas_per_split, plan.key_blocks, sm_count, decode::ctas_per_sm(width))
                            : p.num_splits;
  // At most one split per key block (an empty cache still runs one).
  plan.splits = std::max(1, std::min(requested, plan.key_blocks));
  plan.ctas = ctas_per_split * plan.splits;
  if (plan.splits > 1) {
    const std::size_t partial_rows =
        static_cast<std::size_t>(plan.splits) * p.batch * static_cast<std::size_t>(p.seqlen_q) * p.heads_q;
    plan.partial_o_bytes = partial_rows * static_cast<std::size_t>(value_head_dim(p)) * sizeof(float);
    plan.partial_lse_offset = align_up(plan.partial_o_bytes);
    plan.workspace_bytes = plan.partial_lse_offset + align_up(partial_rows * sizeof(float));
  }
  return plan;
}

}  // namespace flash4::host
