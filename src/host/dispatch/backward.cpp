// Implements host/backward.hpp: plan, check the workspace, zero the deterministic mode's semaphores, encode
// the TMA maps, launch preprocess / main / postprocess on the caller's stream.
#include "host/backward.hpp"

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "host/bwd_planner.hpp"
#include "host/device_info.hpp"
#include "host/dispatch/no_kernel.hpp"
#include "host/dispatch/problem_fields.hpp"
#include "host/dispatch/registry.hpp"
#include "host/kernel_choice.hpp"
#include "host/tma_descriptor.hpp"
#include "host/workspace_check.hpp"

namespace flash4::host {
namespace {

// The head dim of the backward kernel that serves these params; 0 when this build has none.
int kernel_head_dim(const flash4_bwd_params& params) {
  const int head_dim = serving_head_dim(built_backward_kernels(), params.dtype, needed_head_dim(params));
  return bwd_supports_head_dim(head_dim) ? head_dim : 0;
}

}  // namespace

std::size_t backward_workspace_bytes(const flash4_bwd_params& params) {
  const int head_dim = kernel_head_dim(params);
  if (head_dim == 0) return 0;  // the launch reports NO_KERNEL
  return plan_backward(params, head_dim).workspace.total;
}

LaunchResult launch_backward(const flash4_bwd_params& p, flash4_stream_t stream) {
  LaunchResult result;
  const int head_dim_v = value_head_dim(p);
  const KernelKey key{p.dtype, kernel_head_dim(p)};
  const BwdLaunchFn launch = key.head_dim != 0 ? find_bwd_kernel(key) : nullptr;
  if (launch == nullptr) return no_kernel("backward", p, built_bwd_kernels());
  const BwdPlan plan = plan_backward(p, key.head_dim);
  // The bulk copies into and out of the workspace need 16-byte aligned addresses; its arrays sit at
  // 256-byte offsets from the base, so the base must have the workspace alignment.
  result = check_workspace(p.workspace, p.workspace_bytes, plan.workspace.total, "the backward needs",
                           "flash4_bwd_workspace_size");
  if (result.status != FLASH4_SUCCESS) return result;
  DeviceInfo device;
  result.status = current_device_info(device, result.message);
  if (result.status != FLASH4_SUCCESS) return result;
  char* workspace = static_cast<char*>(p.workspace);
  const bool varlen = p.cu_seqlens_q != nullptr;
  const int rows_q = varlen ? p.total_q : p.seqlen_q;
  const int rows_k = varlen ? p.total_k : p.seqlen_k;

  BwdKernelParams kp{};
  const bool is_bf16 = p.dtype == FLASH4_DTYPE_BF16;
  const struct {
    CUtensorMap* map;
    const void* base;
    const flash4_strides* strides;
    int head_dim;  // the true one: the loads zero-fill the kernel's columns past it (host/kernel_choice.hpp)
    int rows;
    int heads;
    int box_rows;
    const char* name;
  } maps[] = {{&kp.tma_q, p.q, &p.q_strides, p.head_dim, rows_q, p.heads_q, plan.tile.block_m, "q"},
              {&kp.tma_do, p.dout, &p.dout_strides, head_dim_v, rows_q, p.heads_q, plan.tile.block_m, "dout"},
              {&kp.tma_k, p.k, &p.k_strides, p.head_dim, rows_k, p.heads_kv, plan.tile.block_n, "k"},
              {&kp.tma_v, p.v, &p.v_strides, head_dim_v, rows_k, p.heads_kv, plan.tile.block_n, "v"}};
  for (const auto& m : maps) {
    const OperandShape shape{is_bf16, m.base, m.strides->batch, m.strides->seq, m.strides->head, m.head_dim, m.rows,
                             m.heads, p.batch, varlen};
    std::string error;
    if (!encode_tma_view(make_operand_view(shape, m.box_rows, plan.tile.box_cols(), plan.tile.swizzle_bytes), m.map,
                         error)) {
      result.status = FLASH4_ERROR_CUDA;
      result.message = std::string("TMA descriptor for ") + m.name + ": " + error;
      return result;
    }
  }
  kp.dq_accum = reinterpret_cast<float*>(workspace + plan.workspace.dq_accum);
  kp.o = p.o;
  kp.dout = p.dout;
  kp.lse = p.lse;
  kp.o_strides = strides_of(p.o_strides);
  kp.dout_strides = strides_of(p.dout_strides);
  kp.dq = p.dq;
  kp.dk = p.dk;
  kp.dv = p.dv;
  kp.dq_strides = strides_of(p.dq_strides);
  kp.dk_strides = strides_of(p.dk_strides);
  kp.dv_strides = strides_of(p.dv_strides);
  kp.lse_log2 = reinterpret_cast<float*>(workspace + plan.workspace.lse_log2);
  kp.dsum = reinterpret_cast<float*>(workspace + plan.workspace.dsum);
  kp.dq_semaphores = reinterpret_cast<int*>(workspace + plan.workspace.semaphores);
  kp.tile_counter = reinterpret_cast<int*>(workspace + plan.workspace.tile_counter);
  kp.rows_per_head = plan.rows_per_head;
  kp.dq_copies = plan.dq_copies;
  kp.head_dim = key.head_dim;
  kp.cols = p.head_dim;
  kp.cols_v = head_dim_v;
  kp.max_seqlen_q = varlen ? p.max_seqlen_q : p.seqlen_q;
  kp.m_blocks_max = plan.m_blocks_max;
  kp.n_blocks_max = plan.n_blocks_max;
  kp.num_tiles = plan.num_tiles;
  kp.dsink = p.dsink;
  set_problem_fields(kp, p, plan.window_left, plan.window_right);
  kp.softmax_scale = p.softmax_scale;
  kp.deterministic = p.deterministic;

  const cudaStream_t cuda_stream = reinterpret_cast<cudaStream_t>(stream);
  // Outside deterministic mode the preprocess zeroes the dQ accumulator rows it covers; in it, each copy's
  // first write stores (bwd_dq_copy_written, kernels/sm90/bwd/prepost.cuh).
  cudaError_t status = cudaSuccess;
  if (p.deterministic) {
    status = cudaMemsetAsync(workspace + plan.workspace.semaphores, 0, plan.workspace.semaphore_bytes, cuda_stream);
  }
  if (status == cudaSuccess) status = launch(kp, bwd_grid_ctas(plan, device.sm_count, kp.has_softcap != 0), cuda_stream);
  if (status != cudaSuccess) {
    result.status = FLASH4_ERROR_CUDA;
    result.message = "backward launch (" + key.to_string() + "): " + cudaGetErrorString(status);
  }
  return result;
}

}  // namespace flash4::host
