#include "host/dispatch/registry.hpp"

#include <cstring>

#include "built_kernels.hpp"

namespace flash4::kernels {
// Defined in the generated translation units (build/generated/fwd_<dtype>_d<D>.cu).
#define FLASH4_DECLARE_FWD(dtype, head_dim) \
  cudaError_t launch_fwd_##dtype##_d##head_dim(const FwdKernelParams&, int, cudaStream_t);
FLASH4_FOR_EACH_BUILT_KERNEL(FLASH4_DECLARE_FWD)
#undef FLASH4_DECLARE_FWD
}  // namespace flash4::kernels

namespace flash4::host {
namespace {

struct Entry {
  const char* dtype_name;
  int head_dim;
  FwdLaunchFn launch;
};

#define FLASH4_FWD_ENTRY(dtype, head_dim) Entry{#dtype, head_dim, &kernels::launch_fwd_##dtype##_d##head_dim},
constexpr Entry kEntries[] = {FLASH4_FOR_EACH_BUILT_KERNEL(FLASH4_FWD_ENTRY) Entry{nullptr, 0, nullptr}};
#undef FLASH4_FWD_ENTRY

const char* dtype_name(flash4_dtype dtype) { return dtype == FLASH4_DTYPE_BF16 ? "bf16" : "fp16"; }

}  // namespace

std::string KernelKey::to_string() const { return std::string(dtype_name(dtype)) + "/d" + std::to_string(head_dim); }

FwdLaunchFn find_fwd_kernel(const KernelKey& key) {
  for (const Entry& entry : kEntries) {
    if (entry.launch != nullptr && entry.head_dim == key.head_dim && std::strcmp(entry.dtype_name, dtype_name(key.dtype)) == 0)
      return entry.launch;
  }
  return nullptr;
}

std::string built_fwd_kernels() {
  std::string list;
  for (const Entry& entry : kEntries) {
    if (entry.launch == nullptr) continue;
    if (!list.empty()) list += ' ';
    list += std::string(entry.dtype_name) + "/d" + std::to_string(entry.head_dim);
  }
  return list.empty() ? "none" : list;
}

}  // namespace flash4::host
