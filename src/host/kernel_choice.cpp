// Implements host/kernel_choice.hpp from the generated list of built kernels.
#include "host/kernel_choice.hpp"

#include <iterator>

#include "built_decode_kernels.hpp"
#include "built_kernels.hpp"

namespace flash4::host {
namespace {

// The dtype tokens of built_kernels.hpp's X(dtype, head_dim) entries.
constexpr flash4_dtype kDtype_bf16 = FLASH4_DTYPE_BF16;
constexpr flash4_dtype kDtype_fp16 = FLASH4_DTYPE_FP16;

#define FLASH4_BUILT_ENTRY(dtype, head_dim) BuiltKernel{kDtype_##dtype, head_dim},
constexpr BuiltKernel kForward[] = {FLASH4_FOR_EACH_BUILT_KERNEL(FLASH4_BUILT_ENTRY)};
constexpr BuiltKernel kBackward[] = {FLASH4_FOR_EACH_BUILT_BWD_KERNEL(FLASH4_BUILT_ENTRY)};
// A build may have no decode kernel (FLASH4_HEAD_DIMS without 64, 128, 192 and 256): the array ends with an
// entry of head dim 0, which serves nothing.
constexpr BuiltKernel kDecode[] = {FLASH4_FOR_EACH_BUILT_DECODE_KERNEL(FLASH4_BUILT_ENTRY) BuiltKernel{kDtype_bf16, 0}};
#undef FLASH4_BUILT_ENTRY

}  // namespace

std::span<const BuiltKernel> built_forward_kernels() { return kForward; }
std::span<const BuiltKernel> built_backward_kernels() { return kBackward; }
std::span<const BuiltKernel> built_decode_kernels() { return std::span(kDecode).first(std::size(kDecode) - 1); }

int serving_head_dim(std::span<const BuiltKernel> built, flash4_dtype dtype, int needed) {
  int best = 0;
  for (const BuiltKernel& kernel : built) {
    if (kernel.dtype == dtype && kernel.head_dim >= needed && (best == 0 || kernel.head_dim < best)) {
      best = kernel.head_dim;
    }
  }
  return best;
}

}  // namespace flash4::host
