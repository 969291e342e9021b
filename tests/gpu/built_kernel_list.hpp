// The (dtype, head dim) kernels compiled into this build, as lists the parameterized GPU tests expand.
#pragma once

#include <string>
#include <vector>

#include "built_kernels.hpp"
#include "flash4/flash4.h"

namespace flash4::test {

struct BuiltKernel {
  flash4_dtype dtype;
  int head_dim;
};

#define FLASH4_TEST_ADD_BUILT(dtype_name, hd) \
  kernels.push_back({std::string(#dtype_name) == "bf16" ? FLASH4_DTYPE_BF16 : FLASH4_DTYPE_FP16, hd});

inline std::vector<BuiltKernel> built_forward_kernels() {
  std::vector<BuiltKernel> kernels;
  FLASH4_FOR_EACH_BUILT_KERNEL(FLASH4_TEST_ADD_BUILT)
  return kernels;
}

inline std::vector<BuiltKernel> built_backward_kernels() {
  std::vector<BuiltKernel> kernels;
  FLASH4_FOR_EACH_BUILT_BWD_KERNEL(FLASH4_TEST_ADD_BUILT)
  return kernels;
}

#undef FLASH4_TEST_ADD_BUILT

// The configuration of single-case tests: bf16 D = 128 when built, else the first kernel of the list.
inline BuiltKernel main_of(const std::vector<BuiltKernel>& kernels) {
  for (const BuiltKernel& kernel : kernels) {
    if (kernel.dtype == FLASH4_DTYPE_BF16 && kernel.head_dim == 128) return kernel;
  }
  return kernels.front();
}

}  // namespace flash4::test
