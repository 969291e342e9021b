// Implements host/forward.hpp: plan, look up, check the workspace, encode TMA maps, launch.
#include "host/forward.hpp"

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "host/device_info.hpp"
#include "host/dispatch/registry.hpp"
#include "host/planner.hpp"
#include "host/tma_descriptor.hpp"
#include "host/workspace_check.hpp"

namespace flash4::host {
namespace {

constexpr float kLog2e = 1.4426950408889634f;

// Q/O use (B, Sq, Hq, D); K/V (B, Sk, Hkv, D).
TmaView make_view(const flash4_fwd_params& p, const void* base, const flash4_strides& strides, int rows, int heads,
                  int box_rows, const FwdTileConfig& tile) {
  const OperandShape shape{p.dtype == FLASH4_DTYPE_BF16, base, strides.batch, strides.seq, strides.head, p.head_dim,
                           rows, heads, p.batch, p.cu_seqlens_q != nullptr};
  return make_operand_view(shape, box_rows, tile.box_cols(), tile.swizzle_bytes);
}

}  // namespace

std::size_t forward_workspace_bytes(const flash4_fwd_params& params) {
  return forward_schedules_dynamically(params) ? kFwdWorkspaceBytes : 0;
}

LaunchResult launch_forward(const flash4_fwd_params& p, flash4_stream_t stream) {
  LaunchResult result;
  const KernelKey key{p.dtype, p.head_dim};
  const FwdLaunchFn launch = find_fwd_kernel(key);
  if (launch == nullptr) {
    result.status = FLASH4_ERROR_NO_KERNEL;
    result.message = "no forward kernel for " + key.to_string() + " in this build (built: " + built_fwd_kernels() +
                     "); rebuild with FLASH4_DTYPES / FLASH4_HEAD_DIMS including it";
    return result;
  }
  result = check_workspace(p.workspace, p.workspace_bytes, forward_workspace_bytes(p),
                           "this forward (causal, windowed, varlen or with seqused) claims its tiles from a counter in",
                           "flash4_fwd_workspace_size");
  if (result.status != FLASH4_SUCCESS) return result;
  DeviceInfo device;
  result.status = current_device_info(device, result.message);
  if (result.status != FLASH4_SUCCESS) return result;

  const FwdPlan plan = plan_forward(p, device);
  const bool varlen = p.cu_seqlens_q != nullptr;
  const int rows_q = varlen ? p.total_q : p.seqlen_q;
  const int rows_k = varlen ? p.total_k : p.seqlen_k;

  FwdKernelParams kp{};
  const struct {
    CUtensorMap* map;
    const void* base;
    const flash4_strides* strides;
    int rows;
    int heads;
    int box_rows;
    const char* name;
  } maps[] = {{&kp.tma_q, p.q, &p.q_strides, rows_q, p.heads_q, plan.tile.block_m(), "q"},
              {&kp.tma_k, p.k, &p.k_strides, rows_k, p.heads_kv, plan.tile.block_n, "k"},
              {&kp.tma_v, p.v, &p.v_strides, rows_k, p.heads_kv, plan.tile.block_n, "v"}};
  for (const auto& m : maps) {
    std::string error;
    if (!encode_tma_view(make_view(p, m.base, *m.strides, m.rows, m.heads, m.box_rows, plan.tile), m.map, error)) {
      result.status = FLASH4_ERROR_CUDA;
      result.message = std::string("TMA descriptor for ") + m.name + ": " + error;
      return result;
    }
  }
  // A TMA store clips at the tensor's end, not at a sequence's used rows: seqused_q needs the predicated stores.
  kp.store_o_with_tma = !varlen && p.seqused_q == nullptr && plan.tile.stages_output();
  if (kp.store_o_with_tma) {
    std::string error;  // each consumer warpgroup stores its own rows
    if (!encode_tma_view(make_view(p, p.o, p.o_strides, rows_q, p.heads_q, kRowsPerConsumerWarpgroup, plan.tile), &kp.tma_o,
                         error)) {
      result.status = FLASH4_ERROR_CUDA;
      result.message = "TMA descriptor for o: " + error;
      return result;
    }
  }
  kp.o = p.o;
  kp.o_stride_batch = p.o_strides.batch;
  kp.o_stride_seq = p.o_strides.seq;
  kp.o_stride_head = p.o_strides.head;
  kp.lse = p.lse;
  kp.batch = p.batch;
  kp.seqlen_q = p.seqlen_q;
  kp.seqlen_k = p.seqlen_k;
  kp.heads_q = p.heads_q;
  kp.heads_kv = p.heads_kv;
  kp.total_q = p.total_q;
  kp.cu_seqlens_q = p.cu_seqlens_q;
  kp.cu_seqlens_k = p.cu_seqlens_k;
  kp.seqused_q = p.seqused_q;
  kp.seqused_k = p.seqused_k;
  kp.sink = p.sink;
  kp.has_softcap = p.softcap > 0.0f;
  kp.scale_log2 = (kp.has_softcap ? p.softcap : p.softmax_scale) * kLog2e;
  kp.softcap_prescale = kp.has_softcap ? p.softmax_scale / p.softcap : 1.0f;
  kp.window_left = plan.window_left;
  kp.window_right = plan.window_right;
  kp.order = plan.order;
  kp.num_tiles = plan.order.num_tiles();
  const auto cuda_stream = reinterpret_cast<cudaStream_t>(stream);
  if (plan.dynamic) {
    kp.tile_counter = static_cast<int*>(p.workspace);
    const cudaError_t zeroed = cudaMemsetAsync(kp.tile_counter, 0, sizeof(int), cuda_stream);
    if (zeroed != cudaSuccess) {
      result.status = FLASH4_ERROR_CUDA;
      result.message = std::string("forward: zeroing the tile counter: ") + cudaGetErrorString(zeroed);
      return result;
    }
  }

  const cudaError_t status = launch(kp, plan.num_ctas, cuda_stream);
  if (status != cudaSuccess) {
    result.status = FLASH4_ERROR_CUDA;
    result.message = "forward launch (" + key.to_string() + "): " + cudaGetErrorString(status);
  }
  return result;
}

}  // namespace flash4::host
