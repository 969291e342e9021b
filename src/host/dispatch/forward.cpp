// Implements host/forward.hpp: plan, look up, check the workspace, encode TMA maps, launch.
#include "host/forward.hpp"

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>

#include "host/device_info.hpp"
#include "host/dispatch/no_kernel.hpp"
#include "host/dispatch/problem_fields.hpp"
#include "host/dispatch/registry.hpp"
#include "host/kernel_choice.hpp"
#include "host/planner.hpp"
#include "host/tma_descriptor.hpp"
#include "host/workspace_check.hpp"
#include "kernels/common/paged_kv.hpp"
#include "launch/varlen_tiles.hpp"

namespace flash4::host {
namespace {

// Q uses (B, Sq, Hq, D), O (B, Sq, Hq, Dv); K (B, Sk, Hkv, D), V (B, Sk, Hkv, Dv): the true head dims, so that
// loads zero-fill the kernel's columns past them and the O store stops at Dv (host/kernel_choice.hpp).
TmaView make_view(const flash4_fwd_params& p, const void* base, const flash4_strides& strides, int head_dim, int rows,
                  int heads, int box_rows, const FwdTileConfig& tile) {
  const OperandShape shape{p.dtype == FLASH4_DTYPE_BF16, base, strides.batch, strides.seq, strides.head, head_dim,
                           rows, heads, p.batch, p.cu_seqlens_q != nullptr};
  return make_operand_view(shape, box_rows, tile.box_cols(), tile.swizzle_bytes);
}

// A paged cache's K or V: (num_pages, page_size, Hkv, D or Dv).
TmaView make_paged_view(const flash4_fwd_params& p, const void* base, const flash4_strides& strides, int head_dim,
                        int box_rows, const FwdTileConfig& tile) {
  const OperandShape shape{p.dtype == FLASH4_DTYPE_BF16, base, strides.batch, strides.seq, strides.head, head_dim,
                           p.page_size, p.heads_kv, p.num_pages, false};
  return make_operand_view(shape, box_rows, tile.box_cols(), tile.swizzle_bytes);
}

// The varlen tile space in the workspace, as the prepare kernel fills it (launch/varlen_tiles.hpp).
VarlenTileSpace varlen_tile_space(const flash4_fwd_params& p, const FwdPlan& plan) {
  const VarlenWorkspace layout = varlen_workspace(p);
  char* const workspace = static_cast<char*>(p.workspace);
  VarlenTileSpace space{};
  space.cu_seqlens_q = p.cu_seqlens_q;
  space.cu_seqlens_k = p.cu_seqlens_k;
  space.seqused_q = p.seqused_q;
  space.seqused_k = p.seqused_k;
  space.batch = p.batch;
  space.heads = p.heads_q;
  space.block_m = plan.tile.block_m();
  space.max_rows_q = p.max_seqlen_q;
  space.max_rows_k = p.max_seqlen_k;
  space.l2_kv_rows = plan.l2_kv_rows;
  space.tile_counter = reinterpret_cast<int*>(workspace);
  space.num_tiles = reinterpret_cast<int*>(workspace + layout.num_tiles);
  space.bins = reinterpret_cast<int*>(workspace + layout.bins);
  space.num_bins = layout.num_bins;
  space.units = reinterpret_cast<VarlenUnit*>(workspace + layout.units);
  space.unit_capacity = layout.unit_capacity;
  return space;
}

LaunchResult cuda_failure(std::string what, cudaError_t status) {
  cudaGetLastError();  // a failed launch is not sticky; do not leave it for the caller's next check
  return LaunchResult{FLASH4_ERROR_CUDA, std::move(what) + ": " + cudaGetErrorString(status)};
}

}  // namespace

std::size_t forward_workspace_bytes(const flash4_fwd_params& params) {
  if (params.cu_seqlens_q != nullptr) return varlen_workspace(params).bytes;
  return forward_schedules_dynamically(params) ? kFwdWorkspaceBytes : 0;
}

LaunchResult launch_forward(const flash4_fwd_params& p, flash4_stream_t stream) {
  LaunchResult result;
  const int head_dim_v = value_head_dim(p);
  const KernelKey key{p.dtype, serving_head_dim(built_forward_kernels(), p.dtype, needed_head_dim(p))};
  const FwdLaunchFn launch = key.head_dim != 0 ? find_fwd_kernel(key) : nullptr;
  if (launch == nullptr) return no_kernel("forward", p, built_fwd_kernels());
  result = check_workspace(p.workspace, p.workspace_bytes, forward_workspace_bytes(p),
                           "this forward (causal, windowed, varlen or with seqused) claims its tiles from a counter "
                           "(varlen: and lists them) in",
                           "flash4_fwd_workspace_size");
  if (result.status != FLASH4_SUCCESS) return result;
  DeviceInfo device;
  result.status = current_device_info(device, result.message);
  if (result.status != FLASH4_SUCCESS) return result;

  const FwdPlan plan = plan_forward(p, device, key.head_dim);
  const bool varlen = p.cu_seqlens_q != nullptr;
  const bool paged = p.block_table != nullptr;
  const int rows_q = varlen ? p.total_q : p.seqlen_q;
  const int rows_k = varlen ? p.total_k : p.seqlen_k;
  const int page_box_rows = paged ? flash4::page_box_rows(p.page_size, plan.tile.block_n) : 0;

  FwdKernelParams kp{};
  const struct {
    CUtensorMap* map;
    TmaView view;
    const char* name;
  } maps[] = {
      {&kp.tma_q, make_view(p, p.q, p.q_strides, p.head_dim, rows_q, p.heads_q, plan.tile.block_m(), plan.tile), "q"},
      {&kp.tma_k,
       paged ? make_paged_view(p, p.k, p.k_strides, p.head_dim, page_box_rows, plan.tile)
             : make_view(p, p.k, p.k_strides, p.head_dim, rows_k, p.heads_kv, plan.tile.block_n, plan.tile),
       "k"},
      {&kp.tma_v,
       paged ? make_paged_view(p, p.v, p.v_strides, head_dim_v, page_box_rows, plan.tile)
             : make_view(p, p.v, p.v_strides, head_dim_v, rows_k, p.heads_kv, plan.tile.block_n, plan.tile),
       "v"}};
  for (const auto& m : maps) {
    std::string error;
    if (!encode_tma_view(m.view, m.map, error)) {
      result.status = FLASH4_ERROR_CUDA;
      result.message = std::string("TMA descriptor for ") + m.name + ": " + error;
      return result;
    }
  }
  if (paged) {
    // Valid params are canonical: max_seqlen_k is at most total_k, so this is ceil(Lk / page_size) of rule 6.
    const int longest_k = varlen ? p.max_seqlen_k : p.seqlen_k;
    kp.block_table = p.block_table;
    kp.block_table_stride = p.block_table_stride;
    kp.page_size = p.page_size;
    kp.num_pages = p.num_pages;
    kp.pages_per_sequence = (longest_k + p.page_size - 1) / p.page_size;
    kp.page_box_rows = page_box_rows;
  }
  // A TMA store clips at the tensor's end, not at a sequence's used rows: seqused_q needs the predicated stores.
  kp.store_o_with_tma = !varlen && p.seqused_q == nullptr && plan.tile.stages_output();
  if (kp.store_o_with_tma) {
    std::string error;  // each consumer warpgroup stores its own rows
    const TmaView o_view =
        make_view(p, p.o, p.o_strides, head_dim_v, rows_q, p.heads_q, kRowsPerConsumerWarpgroup, plan.tile);
    if (!encode_tma_view(o_view, &kp.tma_o, error)) {
      result.status = FLASH4_ERROR_CUDA;
      result.message = "TMA descriptor for o: " + error;
      return result;
    }
  }
  kp.o = p.o;
  kp.o_strides = strides_of(p.o_strides);
  kp.o_cols = head_dim_v;
  kp.lse = p.lse;
  set_problem_fields(kp, p, plan.window_left, plan.window_right);
  kp.order = plan.order;
  kp.num_tiles = plan.order.num_tiles();
  const auto cuda_stream = reinterpret_cast<cudaStream_t>(stream);
  if (plan.dynamic) kp.tile_counter = static_cast<int*>(p.workspace);
  if (varlen) {
    // The prepare kernel lists the tiles with rows (and zeroes the counter) on the stream, before the
    // forward reads them: the host never reads the lengths.
    const VarlenTileSpace space = varlen_tile_space(p, plan);
    kp.varlen_units = space.units;
    kp.varlen_num_tiles = space.num_tiles;
    if (const cudaError_t listed = launch_varlen_tiles(space, cuda_stream); listed != cudaSuccess) {
      return cuda_failure("forward: listing the varlen tiles", listed);
    }
  } else if (plan.dynamic) {
    if (const cudaError_t zeroed = cudaMemsetAsync(kp.tile_counter, 0, sizeof(int), cuda_stream); zeroed != cudaSuccess) {
      return cuda_failure("forward: zeroing the tile counter", zeroed);
    }
  }

  if (const cudaError_t status = launch(kp, plan.num_ctas, cuda_stream); status != cudaSuccess) {
    return cuda_failure("forward launch (" + key.to_string() + ")", status);
  }
  return result;
}

}  // namespace flash4::host
