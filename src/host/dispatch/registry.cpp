#include "host/dispatch/registry.hpp"

#include <cstring>

#include "built_kernels.hpp"

namespace flash4::kernels {
// Defined in the generated translation units (build/generated/{fwd,bwd}_<dtype>_d<D>.cu).
#define FLASH4_DECLARE_FWD(dtype, head_dim) \
  cudaError_t launch_fwd_##dtype##_d##head_dim(const FwdKernelParams&, int, cudaStream_t);
FLASH4_FOR_EACH_BUILT_KERNEL(FLASH4_DECLARE_FWD)
#undef FLASH4_DECLARE_FWD
#define FLASH4_DECLARE_BWD(dtype, head_dim) \
  cudaError_t launch_bwd_##dtype##_d##head_dim(const BwdKernelParams&, int, cudaStream_t);
FLASH4_FOR_EACH_BUILT_BWD_KERNEL(FLASH4_DECLARE_BWD)
#undef FLASH4_DECLARE_BWD
}  // namespace flash4::kernels

namespace flash4::host {
namespace {

template <class LaunchFn>
struct Entry {
  const char* dtype_name;
  int head_dim;
  LaunchFn launch;
};

#define FLASH4_FWD_ENTRY(dtype, head_dim) Entry<FwdLaunchFn>{#dtype, head_dim, &kernels::launch_fwd_##dtype##_d##head_dim},
constexpr Entry<FwdLaunchFn> kFwdEntries[] = {FLASH4_FOR_EACH_BUILT_KERNEL(FLASH4_FWD_ENTRY) Entry<FwdLaunchFn>{nullptr, 0, nullptr}};
#undef FLASH4_FWD_ENTRY
#define FLASH4_BWD_ENTRY(dtype, head_dim) Entry<BwdLaunchFn>{#dtype, head_dim, &kernels::launch_bwd_##dtype##_d##head_dim},
constexpr Entry<BwdLaunchFn> kBwdEntries[] = {FLASH4_FOR_EACH_BUILT_BWD_KERNEL(FLASH4_BWD_ENTRY) Entry<BwdLaunchFn>{nullptr, 0, nullptr}};
#undef FLASH4_BWD_ENTRY

const char* dtype_name(flash4_dtype dtype) { return dtype == FLASH4_DTYPE_BF16 ? "bf16" : "fp16"; }

template <class LaunchFn, std::size_t N>
LaunchFn find(const Entry<LaunchFn> (&entries)[N], const KernelKey& key) {
  for (const auto& entry : entries) {
    if (entry.launch != nullptr && entry.head_dim == key.head_dim && std::strcmp(entry.dtype_name, dtype_name(key.dtype)) == 0)
      return entry.launch;
  }
  return nullptr;
}

template <class LaunchFn, std::size_t N>
std::string list(const Entry<LaunchFn> (&entries)[N]) {
  std::string text;
  for (const auto& entry : entries) {
    if (entry.launch == nullptr) continue;
    if (!text.empty()) text += ' ';
    text += std::string(entry.dtype_name) + "/d" + std::to_string(entry.head_dim);
  }
  return text.empty() ? "none" : text;
}

}  // namespace

std::string KernelKey::to_string() const { return std::string(dtype_name(dtype)) + "/d" + std::to_string(head_dim); }

FwdLaunchFn find_fwd_kernel(const KernelKey& key) { return find(kFwdEntries, key); }
std::string built_fwd_kernels() { return list(kFwdEntries); }
BwdLaunchFn find_bwd_kernel(const KernelKey& key) { return find(kBwdEntries, key); }
std::string built_bwd_kernels() { return list(kBwdEntries); }

}  // namespace flash4::host
