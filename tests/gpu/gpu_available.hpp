// GPU tests skip, with the reason, where there is no CUDA device or it is not Hopper.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

namespace flash4::test {

inline bool hopper_available() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();
    return false;
  }
  int major = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
  return major == 9;
}

#define FLASH4_REQUIRE_GPU()                                                                     \
  do {                                                                                           \
    if (!::flash4::test::hopper_available()) GTEST_SKIP() << "no CUDA device (sm_90 Hopper needed)"; \
  } while (0)

#define FLASH4_CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << #expr << ": " << cudaGetErrorString(cudaGetLastError())

}  // namespace flash4::test
