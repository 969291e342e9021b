// Implements host/kvcache.hpp: the registry of decode kernels, the choice of the kernel that serves the call's
// head dims (the smallest built width >= both, host/kernel_choice.hpp), the kernel parameters, the workspace
// check and the launch.
#include "host/kvcache.hpp"

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "built_decode_kernels.hpp"
#include "host/device_info.hpp"
#include "host/dispatch/no_kernel.hpp"
#include "host/dispatch/problem_fields.hpp"
#include "host/kernel_choice.hpp"
#include "host/kvcache_plan.hpp"
#include "host/workspace_check.hpp"
#include "launch/decode_params.hpp"

namespace flash4::kernels {
// Defined in the generated translation units (build/generated/decode_<dtype>_d<D>.cu).
#define FLASH4_DECLARE_DECODE(dtype, head_dim) \
  cudaError_t launch_decode_##dtype##_d##head_dim(const DecodeParams&, int row_tiles, int ctas, cudaStream_t);
FLASH4_FOR_EACH_BUILT_DECODE_KERNEL(FLASH4_DECLARE_DECODE)
#undef FLASH4_DECLARE_DECODE
}  // namespace flash4::kernels

namespace flash4::host {
namespace {

using DecodeLaunchFn = cudaError_t (*)(const DecodeParams&, int, int, cudaStream_t);

struct DecodeEntry {
  flash4_dtype dtype;
  int width;
  DecodeLaunchFn launch;
};

#define FLASH4_DECODE_ENTRY(dtype, head_dim)                                                        \
  DecodeEntry{std::string_view(#dtype) == "bf16" ? FLASH4_DTYPE_BF16 : FLASH4_DTYPE_FP16, head_dim, \
              &kernels::launch_decode_##dtype##_d##head_dim},
constexpr DecodeEntry kEntries[] = {FLASH4_FOR_EACH_BUILT_DECODE_KERNEL(FLASH4_DECODE_ENTRY)
                                        DecodeEntry{FLASH4_DTYPE_BF16, 0, nullptr}};
#undef FLASH4_DECODE_ENTRY

const char* dtype_name(flash4_dtype dtype) { return dtype == FLASH4_DTYPE_BF16 ? "bf16" : "fp16"; }

DecodeLaunchFn find_decode_kernel(flash4_dtype dtype, int width) {
  for (const DecodeEntry& entry : kEntries) {
    if (entry.launch != nullptr && entry.dtype == dtype && entry.width == width) return entry.launch;
  }
  return nullptr;
}

std::string built_decode_list() {
  std::string list;
  for (const DecodeEntry& entry : kEntries) {
    if (entry.launch == nullptr) continue;
    if (!list.empty()) list += ' ';
    list += dtype_name(entry.dtype);
    list += "/d";
    list += std::to_string(entry.width);
  }
  return list.empty() ? "none" : list;
}

// The width of the built decode kernel that serves the call; 0 when none is wide enough.
int serving_width(const flash4_kvcache_params& p) {
  return serving_head_dim(built_decode_kernels(), p.dtype, needed_head_dim(p));
}

// The plan for these params on the current device (the SM count only matters when num_splits is 0), or
// NO_KERNEL when this build has no decode kernel wide enough for them.
LaunchResult plan_on_device(const flash4_kvcache_params& p, KvcachePlan& plan) {
  const int width = serving_width(p);
  if (width == 0) return no_kernel("decode", p, built_decode_list());
  LaunchResult result;
  int sm_count = 0;
  if (kvcache_plan_needs_device(p)) {
    DeviceInfo device;
    result.status = current_device_info(device, result.message);
    if (result.status != FLASH4_SUCCESS) return result;
    sm_count = device.sm_count;
  }
  plan = plan_kvcache(p, width, sm_count);
  return result;
}

DecodeParams kernel_params(const flash4_kvcache_params& p, const KvcachePlan& plan) {
  DecodeParams kp{};
  kp.q = p.q;
  kp.k_cache = p.k_cache;
  kp.v_cache = p.v_cache;
  kp.k_new = p.seqlen_new > 0 ? p.k_new : nullptr;
  kp.v_new = p.seqlen_new > 0 ? p.v_new : nullptr;
  kp.o = p.o;
  kp.lse = p.lse;
  kp.q_strides = strides_of(p.q_strides);
  kp.k_cache_strides = strides_of(p.k_cache_strides);
  kp.v_cache_strides = strides_of(p.v_cache_strides);
  kp.k_new_strides = strides_of(p.k_new_strides);
  kp.v_new_strides = strides_of(p.v_new_strides);
  kp.o_strides = strides_of(p.o_strides);
  kp.batch = p.batch;
  kp.seqlen_q = p.seqlen_q;
  kp.seqlen_new = p.seqlen_new;
  kp.heads_q = p.heads_q;
  kp.heads_kv = p.heads_kv;
  kp.head_dim = p.head_dim;
  kp.head_dim_v = value_head_dim(p);
  kp.group = plan.group;
  kp.rows = plan.rows;
  kp.row_blocks = plan.row_blocks;
  kp.capacity = plan.capacity;
  kp.cache_batch = p.cache_batch;
  kp.cache_seqlens = p.cache_seqlens;
  kp.cache_batch_idx = p.block_table != nullptr ? nullptr : p.cache_batch_idx;
  kp.block_table = p.block_table;
  kp.block_table_stride = p.block_table_stride;
  kp.num_pages = p.num_pages;
  kp.page = FastDivmod::make(p.block_table != nullptr ? static_cast<std::uint32_t>(p.page_size) : 1u);
  set_score_constants(kp, p.softmax_scale, p.softcap);
  kp.window_left = p.window_left;
  kp.window_right = p.window_right;
  kp.splits = plan.splits;
  if (plan.splits > 1) {
    char* workspace = static_cast<char*>(p.workspace);
    kp.partial_o = reinterpret_cast<float*>(workspace);
    kp.partial_lse = reinterpret_cast<float*>(workspace + plan.partial_lse_offset);
  }
  return kp;
}

}  // namespace

LaunchResult kvcache_workspace_bytes(const flash4_kvcache_params& p, std::size_t& bytes) {
  KvcachePlan plan;
  LaunchResult result = plan_on_device(p, plan);
  bytes = result.status == FLASH4_SUCCESS ? plan.workspace_bytes : 0;
  return result;
}

LaunchResult launch_kvcache(const flash4_kvcache_params& p, flash4_stream_t stream) {
  KvcachePlan plan;
  LaunchResult result = plan_on_device(p, plan);
  if (result.status != FLASH4_SUCCESS) return result;
  const DecodeLaunchFn launch = find_decode_kernel(p.dtype, plan.width);
  result = check_workspace(p.workspace, p.workspace_bytes, plan.workspace_bytes,
                           "this call runs " + std::to_string(plan.splits) + " splits and needs",
                           "flash4_kvcache_workspace_size on the device of the call");
  if (result.status != FLASH4_SUCCESS) return result;
  DeviceInfo device;  // also when the plan did not need it: launching needs a Hopper device
  result.status = current_device_info(device, result.message);
  if (result.status != FLASH4_SUCCESS) return result;
  const cudaError_t status = launch(kernel_params(p, plan), plan.row_tiles, static_cast<int>(plan.ctas),
                                    reinterpret_cast<cudaStream_t>(stream));
  if (status != cudaSuccess) {
    result.status = FLASH4_ERROR_CUDA;
    result.message = std::string("kvcache launch (") + dtype_name(p.dtype) + "/d" + std::to_string(plan.width) +
                     ", " + std::to_string(plan.splits) + " splits): " + cudaGetErrorString(status);
  }
  return result;
}

}  // namespace flash4::host
