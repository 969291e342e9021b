#include "host/planner.hpp"

#include <algorithm>

#include "host/scheduler.hpp"

namespace flash4::host {

FwdPlan plan_forward(const flash4_fwd_params& params, const DeviceInfo& device) {
  FwdPlan plan;
  plan.tile = fwd_tile_config(params.head_dim);
  const bool varlen = params.cu_seqlens_q != nullptr;
  // Varlen grids are sized by the longest sequence; tiles past a shorter sequence's end exit at once.
  const int rows_q = varlen ? params.max_seqlen_q : params.seqlen_q;
  const int rows_k = varlen ? params.max_seqlen_k : params.seqlen_k;
  const int num_m_blocks = (rows_q + plan.tile.block_m - 1) / plan.tile.block_m;
  const std::size_t kv_bytes_per_head = 2 * std::size_t(rows_k) * params.head_dim * kElementBytes;
  plan.order = make_tile_order(params.batch, params.heads_q, num_m_blocks, params.causal != 0, kv_bytes_per_head,
                               device.l2_bytes);
#if defined(FLASH4_LPT_ORDER_ENABLED) && !FLASH4_LPT_ORDER_ENABLED
  plan.order.longest_first = false;  // A/B build: ascending m-blocks
#endif
  plan.num_ctas = std::max(1, std::min(plan.order.num_tiles(), device.sm_count));
  plan.window_left = params.window_left;
  plan.window_right = params.causal ? 0 : params.window_right;
  return plan;
}

}  // namespace flash4::host
