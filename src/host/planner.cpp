#include "host/planner.hpp"

#include <algorithm>
#include <cstdint>

#include "host/scheduler.hpp"

namespace flash4::host {

bool forward_schedules_dynamically(const flash4_fwd_params& params) {
  return params.causal != 0 || params.window_left >= 0 || params.window_right >= 0 || params.cu_seqlens_q != nullptr ||
         params.seqused_q != nullptr || params.seqused_k != nullptr;
}

FwdPlan plan_forward(const flash4_fwd_params& params, const DeviceInfo& device) {
  FwdPlan plan;
  plan.tile = fwd_tile_config(params.head_dim);
  plan.window_left = params.window_left;
  plan.window_right = params.causal ? 0 : params.window_right;
  plan.dynamic = forward_schedules_dynamically(params);
  const bool varlen = params.cu_seqlens_q != nullptr;
  // Varlen grids are sized by the longest sequence; the producer skips tiles past a shorter sequence's end.
  const int64_t rows_q = varlen ? params.max_seqlen_q : params.seqlen_q;
  const int64_t rows_k = varlen ? params.max_seqlen_k : params.seqlen_k;
  const int64_t block_m = plan.tile.block_m();
  const int num_m_blocks = static_cast<int>((rows_q + block_m - 1) / block_m);  // validation bounds the tile count
  const std::size_t kv_bytes_per_head = 2 * static_cast<std::size_t>(rows_k) * params.head_dim * kElementBytes;
  // A bounded right edge (causal included) makes later query blocks see more keys: longest first.
  plan.order = make_tile_order(params.batch, params.heads_q, num_m_blocks, plan.window_right >= 0, kv_bytes_per_head,
                               device.l2_bytes);
  plan.num_ctas = std::max(1, std::min(plan.order.num_tiles(), device.sm_count));
  return plan;
}

}  // namespace flash4::host
