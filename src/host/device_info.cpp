#include "host/device_info.hpp"

#include <cuda_runtime.h>

#include <array>
#include <mutex>

namespace flash4::host {
namespace {

constexpr int kMaxDevices = 64;
constexpr int kRequiredMajor = 9;  // kernels are compiled for sm_90a only

}  // namespace

flash4_status current_device_info(DeviceInfo& info, std::string& message) {
  static std::array<DeviceInfo, kMaxDevices> cache{};
  static std::array<bool, kMaxDevices> cached{};
  static std::mutex mutex;

  // A thread that has made no runtime call yet (autograd runs the backward on threads of its own) may have
  // no current context, and the driver's tensor-map encoder then fails (CUDA_ERROR_INVALID_CONTEXT).
  // cudaFree(nullptr) does nothing but initialize the runtime on this thread: it binds the device's primary
  // context where no context is current, and leaves a current one alone.
  thread_local bool runtime_ready = false;
  if (!runtime_ready) {
    if (cudaFree(nullptr) == cudaSuccess) runtime_ready = true;
    cudaGetLastError();
  }
  int device = 0;
  const cudaError_t status = cudaGetDevice(&device);
  if (status != cudaSuccess) {
    message = std::string("no usable CUDA device: cudaGetDevice failed: ") + cudaGetErrorString(status);
    cudaGetLastError();  // do not leave the sticky-free error for the caller's next check
    return FLASH4_ERROR_NO_DEVICE;
  }
  if (device < 0 || device >= kMaxDevices) {
    message = "CUDA device ordinal " + std::to_string(device) + " is beyond the " + std::to_string(kMaxDevices) +
              " devices flash4 tracks";
    return FLASH4_ERROR_NO_DEVICE;
  }
  std::lock_guard<std::mutex> lock(mutex);
  if (!cached[device]) {
    DeviceInfo fresh;
    fresh.ordinal = device;
    int l2 = 0;
    if (cudaDeviceGetAttribute(&fresh.sm_count, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
        cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device) != cudaSuccess ||
        cudaDeviceGetAttribute(&fresh.major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
        cudaDeviceGetAttribute(&fresh.minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
      message = "cudaDeviceGetAttribute failed on device " + std::to_string(device);
      cudaGetLastError();
      return FLASH4_ERROR_CUDA;
    }
    fresh.l2_bytes = static_cast<std::size_t>(l2);
    cache[device] = fresh;
    cached[device] = true;
  }
  info = cache[device];
  if (info.major != kRequiredMajor) {
    message = "device " + std::to_string(device) + " has compute capability " + std::to_string(info.major) + "." +
              std::to_string(info.minor) + "; flash4 kernels are built for sm_90a (Hopper) only";
    return FLASH4_ERROR_NO_DEVICE;
  }
  return FLASH4_SUCCESS;
}

}  // namespace flash4::host
