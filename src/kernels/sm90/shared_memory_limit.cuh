// Host side of a launch: raising a kernel's dynamic shared-memory limit once per device.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

namespace flash4::sm90 {

// The limit is a property of the kernel on each device, so it is set the first time `Kernel` launches on
// the current device rather than on every launch: a driver call per launch is host time that short
// problems feel. Devices past the 64 tracked ones set it every time.
template <auto Kernel>
cudaError_t raise_shared_memory_limit(int bytes) {
  static std::atomic<std::uint64_t> configured_devices{0};
  int device = 0;
  cudaError_t status = cudaGetDevice(&device);
  if (status != cudaSuccess) return status;
  const std::uint64_t bit = device >= 0 && device < 64 ? std::uint64_t{1} << device : 0;
  if (bit != 0 && (configured_devices.load(std::memory_order_acquire) & bit) != 0) return cudaSuccess;
  status = cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (status == cudaSuccess) configured_devices.fetch_or(bit, std::memory_order_release);
  return status;
}

}  // namespace flash4::sm90
