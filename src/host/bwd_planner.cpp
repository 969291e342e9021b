#include "host/bwd_planner.hpp"

#include <algorithm>

namespace flash4::host {
namespace {

constexpr std::size_t kWorkspaceAlignment = 256;

std::size_t align_up(std::size_t bytes) { return (bytes + kWorkspaceAlignment - 1) / kWorkspaceAlignment * kWorkspaceAlignment; }

}  // namespace

BwdPlan plan_backward(const flash4_bwd_params& params) {
  BwdPlan plan;
  plan.tile = bwd_tile_config(params.head_dim);
  const bool varlen = params.cu_seqlens_q != nullptr;
  const int rows_q = varlen ? params.max_seqlen_q : params.seqlen_q;
  const int rows_k = varlen ? params.max_seqlen_k : params.seqlen_k;
  plan.m_blocks_max = (rows_q + plan.tile.block_m - 1) / plan.tile.block_m;
  plan.n_blocks_max = (rows_k + plan.tile.block_n - 1) / plan.tile.block_n;
  plan.num_tiles = plan.n_blocks_max * params.batch * params.heads_kv;
  plan.window_left = params.window_left;
  plan.window_right = params.causal ? 0 : params.window_right;

  const BwdWorkspaceRows rows{plan.tile.block_m, params.seqlen_q, varlen};
  plan.rows_per_head = rows.rows_per_head(params.batch, params.total_q);
  const std::size_t row_count = std::size_t(params.heads_q) * std::size_t(plan.rows_per_head);
  BwdWorkspaceLayout& ws = plan.workspace;
  plan.dq_copies = bwd_dq_copies(params.deterministic != 0, plan.n_blocks_max);
  const std::size_t copies = std::size_t(plan.dq_copies);
  ws.dq_accum_bytes = copies * row_count * params.head_dim * sizeof(float);
  ws.semaphore_bytes = copies * std::size_t(params.heads_q) * params.batch * plan.m_blocks_max * sizeof(int);
  ws.dq_accum = 0;
  ws.lse_log2 = align_up(ws.dq_accum + ws.dq_accum_bytes);
  ws.dsum = align_up(ws.lse_log2 + row_count * sizeof(float));
  ws.semaphores = align_up(ws.dsum + row_count * sizeof(float));
  ws.tile_counter = align_up(ws.semaphores + ws.semaphore_bytes);
  ws.total = align_up(ws.tile_counter + sizeof(int));
  return plan;
}

int bwd_grid_ctas(const BwdPlan& plan, int sm_count, bool softcap) {
  if (!bwd_persistent_kernel(plan.tile.head_dim, softcap)) return plan.num_tiles;
  return std::min(plan.num_tiles, std::max(1, sm_count));
}

}  // namespace flash4::host
