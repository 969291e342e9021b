#include "host/planner.hpp"

#include <algorithm>
#include <cstdint>

#include "host/kernel_choice.hpp"
#include "host/scheduler.hpp"
#include "kernels/common/varlen_tiles.hpp"

namespace flash4::host {

namespace {

std::size_t round_up(std::size_t bytes, std::size_t alignment) { return (bytes + alignment - 1) / alignment * alignment; }

}  // namespace

VarlenWorkspace varlen_workspace(const flash4_fwd_params& params) {
  VarlenWorkspace w;
  // Validation bounds batch x ceil(max_seqlen_q / 64) (times heads) by 2^30: the counts fit an int.
  const int64_t block = kRowsPerConsumerWarpgroup;
  const int64_t most_blocks = (int64_t{params.max_seqlen_q} + block - 1) / block;
  w.num_bins = static_cast<int>(most_blocks + 1);
  w.unit_capacity = static_cast<int>(std::min(int64_t{params.total_q} / block + params.batch, params.batch * most_blocks));
  w.num_tiles = sizeof(int);  // after the tile counter
  w.bins = kFwdWorkspaceBytes;
  w.units = round_up(w.bins + sizeof(int) * static_cast<std::size_t>(w.num_bins), kFwdWorkspaceBytes);
  w.bytes = w.units + sizeof(VarlenUnit) * static_cast<std::size_t>(w.unit_capacity);
  return w;
}

bool forward_schedules_dynamically(const flash4_fwd_params& params) {
  return params.causal != 0 || params.window_left >= 0 || params.window_right >= 0 || params.cu_seqlens_q != nullptr ||
         params.seqused_q != nullptr || params.seqused_k != nullptr;
}

FwdPlan plan_forward(const flash4_fwd_params& params, const DeviceInfo& device, int kernel_head_dim) {
  FwdPlan plan;
  plan.tile = fwd_tile_config(kernel_head_dim != 0 ? kernel_head_dim : params.head_dim);
  plan.window_left = params.window_left;
  plan.window_right = params.causal ? 0 : params.window_right;
  const bool varlen = params.cu_seqlens_q != nullptr;
  // Varlen grids are sized by the longest sequence: the tile count bounds the prepare kernel's list.
  const int64_t rows_q = varlen ? params.max_seqlen_q : params.seqlen_q;
  const int64_t rows_k = varlen ? params.max_seqlen_k : params.seqlen_k;
  const int64_t block_m = plan.tile.block_m();
  const int num_m_blocks = static_cast<int>((rows_q + block_m - 1) / block_m);  // validation bounds the tile count
  // The bytes a head's K and V occupy in memory (and in L2): their true head dims.
  const std::size_t row_bytes = static_cast<std::size_t>(params.head_dim + value_head_dim(params)) * kElementBytes;
  const std::size_t kv_bytes_per_head = static_cast<std::size_t>(rows_k) * row_bytes;
  // A bounded right edge (causal included) makes later query blocks see more keys: longest first.
  plan.order = make_tile_order(params.batch, params.heads_q, num_m_blocks, plan.window_right >= 0, kv_bytes_per_head,
                               device.l2_bytes);
  if (varlen) {
    plan.l2_kv_rows = static_cast<int>(std::min<std::size_t>(device.l2_bytes / kL2KvShareDivisor / row_bytes, INT32_MAX));
  }
  plan.num_ctas = std::max(1, std::min(plan.order.num_tiles(), device.sm_count));
  // With no more tiles than CTAs every CTA runs only its first tile, blockIdx.x, either way: the static walk
  // then needs neither the counter nor the memset that zeroes it (a launch's worth of host time).
  plan.dynamic = forward_schedules_dynamically(params) && plan.order.num_tiles() > plan.num_ctas;
  return plan;
}

}  // namespace flash4::host
