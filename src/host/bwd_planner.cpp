#include "host/bwd_planner.hpp"

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace flash4::host {
namespace {

constexpr std::size_t kWorkspaceAlignment = 256;
// The kernels take the block and tile counts as int; the tile counter runs one grid past the last tile, and
// a grid has at most one CTA per tile, so tiles must stay within half of int32 (validation's
// FLASH4_MAX_BLOCKS gives this for every build but paired CTAs, which round key blocks up to pairs).
constexpr std::int64_t kMaxCount = std::int64_t{1} << 30;

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// A count the kernels take as int; beyond kMaxCount validation has let through what it must not.
int kernel_count(std::int64_t value, const char* what) {
  if (value < 0 || value > kMaxCount) {
    throw std::length_error(std::string("backward planner: ") + what + " = " + std::to_string(value) +
                            " is outside [0, 2^30] (validation should have rejected these params)");
  }
  return static_cast<int>(value);
}

// a * b, throwing on overflow (validated sizes stay far below it).
template <class T>
T product(T a, T b) {
  T result = 0;
  if (__builtin_mul_overflow(a, b, &result)) throw std::length_error("backward planner: a size overflows");
  return result;
}

// The end of an array of `bytes` bytes at `offset`, rounded up to the next array's alignment.
std::size_t next_offset(std::size_t offset, std::size_t bytes) {
  std::size_t end = 0;
  if (bytes > SIZE_MAX / 2 || __builtin_add_overflow(offset, bytes + kWorkspaceAlignment - 1, &end)) {
    throw std::length_error("backward planner: the workspace size overflows");
  }
  return end / kWorkspaceAlignment * kWorkspaceAlignment;
}

}  // namespace

BwdPlan plan_backward(const flash4_bwd_params& params, int kernel_head_dim) {
  BwdPlan plan;
  const int head_dim = kernel_head_dim != 0 ? kernel_head_dim : params.head_dim;
  plan.tile = bwd_tile_config(head_dim);
  const bool varlen = params.cu_seqlens_q != nullptr;
  // All counts in int64: an int32 length near 2^31 plus a block overflows int (and did: a 2^31 - 1
  // max_seqlen_q sized the workspace at 1 KiB).
  const std::int64_t rows_q = varlen ? params.max_seqlen_q : params.seqlen_q;
  const std::int64_t rows_k = varlen ? params.max_seqlen_k : params.seqlen_k;
  plan.m_blocks_max = kernel_count(ceil_div(rows_q, plan.tile.block_m), "query blocks per sequence");
  const std::int64_t n_blocks = ceil_div(rows_k, plan.tile.block_n);
  plan.n_blocks_max = kernel_count(n_blocks, "key blocks per sequence");
  const std::int64_t batch = params.batch, heads_q = params.heads_q, heads_kv = params.heads_kv;
  plan.num_tiles = kernel_count(product(product(n_blocks, batch), heads_kv), "tiles");
  plan.window_left = params.window_left;
  plan.window_right = params.causal ? 0 : params.window_right;

  // BwdWorkspaceRows pads a fixed length to whole blocks in int.
  if (!varlen) kernel_count(rows_q, "seqlen_q");
  const BwdWorkspaceRows rows{plan.tile.block_m, params.seqlen_q, varlen};
  plan.rows_per_head = rows.rows_per_head(params.batch, params.total_q);
  const std::size_t row_count = product(std::size_t(heads_q), std::size_t(plan.rows_per_head));
  BwdWorkspaceLayout& ws = plan.workspace;
  plan.dq_copies = bwd_dq_copies(params.deterministic != 0, plan.n_blocks_max);
  const std::size_t copies = std::size_t(plan.dq_copies);
  ws.dq_accum_bytes = product(product(copies, row_count), std::size_t(head_dim) * sizeof(float));
  ws.semaphore_bytes =
      product(product(copies * sizeof(int), std::size_t(heads_q) * std::size_t(batch)), std::size_t(plan.m_blocks_max));
  const std::size_t row_array_bytes = product(row_count, sizeof(float));
  ws.dq_accum = 0;
  ws.lse_log2 = next_offset(ws.dq_accum, ws.dq_accum_bytes);
  ws.dsum = next_offset(ws.lse_log2, row_array_bytes);
  ws.semaphores = next_offset(ws.dsum, row_array_bytes);
  ws.tile_counter = next_offset(ws.semaphores, ws.semaphore_bytes);
  ws.total = next_offset(ws.tile_counter, sizeof(int));
  return plan;
}

int bwd_grid_ctas(const BwdPlan& plan, int sm_count, bool softcap) {
  if (!bwd_persistent_kernel(plan.tile.head_dim, softcap)) return plan.num_tiles;
  return std::min(plan.num_tiles, std::max(1, sm_count));
}

}  // namespace flash4::host
